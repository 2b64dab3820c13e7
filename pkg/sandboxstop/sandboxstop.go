// Package sandboxstop is the operator's stop of a sandbox pod (docs/nothing-lost.md, "The
// operator's stop"): the wire of sandboxd's POST /stop, and the operator's client of it.
//
// A reaped claim's pod is deleted, and the kubelet takes about 3 s to stop it; one writer per
// workspace keeps the next pod on that workspace waiting for it. With the stop, the operator asks
// sandboxd itself, with the claim's token: sandboxd, the container's first process, ends its
// sessions and tool calls, holds its call gate and kills every other process of the container,
// waits for each to exit, and says so. Then nothing in the pod writes the workspace any more, and
// the operator deletes the pod at once (grace period 0).
package sandboxstop

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Path is sandboxd's endpoint of the stop (POST).
const Path = "/stop"

// Response is the answer of POST /stop: 200 with Stopped when every process of the container
// but sandboxd has exited and no tool call runs or will run; else an error code and message
// (409 not_init: sandboxd is not the container's first process; 500 failed).
type Response struct {
	Stopped bool `json:"stopped"`
	// Killed is how many processes the stop killed.
	Killed  int    `json:"killed"`
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
}

// Timeout bounds one stop, the answer included: sandboxd's own bound is shorter.
const Timeout = 15 * time.Second

// Client stops sandboxes over HTTP.
type Client struct {
	HTTP *http.Client
}

// NewClient returns a client with no proxy (sandbox pods are reached at their IPs) and Timeout.
func NewClient() *Client {
	return &Client{HTTP: &http.Client{
		Timeout:   Timeout,
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, DisableKeepAlives: true},
	}}
}

// Stop asks sandboxd at base (http://ip:port) to stop, with the claim's token. It returns the
// answer when sandboxd says it stopped, and an error otherwise: then the pod must be left to
// the kubelet.
func (c *Client) Stop(ctx context.Context, base, token string) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+Path, bytes.NewReader(nil))
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Response{}, fmt.Errorf("reading the answer of %s: %w", Path, err)
	}
	var r Response
	if err := json.Unmarshal(body, &r); err != nil {
		return Response{}, fmt.Errorf("%s answered %d, not JSON: %.200q", Path, resp.StatusCode, body)
	}
	if resp.StatusCode != http.StatusOK || !r.Stopped {
		return r, fmt.Errorf("%s answered %d %s: %s", Path, resp.StatusCode, r.Error, r.Message)
	}
	return r, nil
}
