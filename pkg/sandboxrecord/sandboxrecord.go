// Package sandboxrecord is the operator's read of a sandbox's session log (docs/record.md §2.1):
// the wire of sandboxd's GET /record and the client that follows it. The operator reads over the
// connection it already opens to a sandbox (as for the stop, pkg/sandboxstop), with the claim's
// token; the sandbox opens nothing.
package sandboxrecord

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Path is sandboxd's endpoint of the log (GET only).
const Path = "/record"

// BootHeader carries the boot id of the log that answers.
const BootHeader = "Airlock-Record-Boot"

// stoppedKind is the kind of a log's last entry (record.KindSandboxStopped).
const stoppedKind = "sandbox.stopped"

// maxLine bounds one line of the log (record.MaxLineBytes).
const maxLine = 1 << 20

// BootChangedError says that sandboxd restarted: the log that answers is boot Boot, not the one
// asked for. What the earlier boot did not hand over is lost; read Boot from 0.
type BootChangedError struct{ Boot string }

func (e *BootChangedError) Error() string {
	return fmt.Sprintf("sandboxd restarted: its log is now boot %q", e.Boot)
}

// ErrCut is a stream that ended before the log's stopped entry: read again from the cursor.
var ErrCut = errors.New("the record's stream ended before the log's end")

// Client reads sandboxes' logs over HTTP.
type Client struct {
	HTTP *http.Client
}

// NewClient returns a client with no proxy (sandbox pods are reached at their IPs) and no
// overall timeout (a followed log is read for the sandbox's life; ctx ends it).
func NewClient() *Client {
	return &Client{HTTP: &http.Client{Transport: newTransport(DialTimeout, HeaderTimeout)}}
}

// Follow reads the log of the sandbox at base (e.g. http://10.0.0.7:8080) with the claim's
// token, from the entry after source_seq after of boot (boot "" and after 0: from the start),
// and calls take with each line as it comes, in order. It returns nil once the log's stopped
// entry was taken, a *BootChangedError when sandboxd restarted, ErrCut when the stream ended
// early, take's error, or ctx's.
func (c *Client) Follow(ctx context.Context, base, token, boot string, after uint64, take func(line []byte) error) error {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "follow": {"1"}}
	if boot != "" {
		q.Set("boot", boot)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+Path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusConflict:
		return &BootChangedError{Boot: resp.Header.Get(BootHeader)}
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fmt.Errorf("GET %s: %s: %s", Path, resp.Status, bytes.TrimSpace(body))
	}
	err = readLines(resp.Body, take)
	if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
		return ctxErr
	}
	return err
}

// readLines calls take with each line of r until the stopped entry (nil) or the end (ErrCut).
func readLines(r io.Reader, take func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	for sc.Scan() {
		line := sc.Bytes()
		if err := take(line); err != nil {
			return err
		}
		var k struct {
			Kind string `json:"kind"`
		}
		if json.Unmarshal(line, &k) == nil && k.Kind == stoppedKind {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrCut, err)
	}
	return ErrCut
}

// A read gives up on a pod that does not answer, and is read again from its cursor: a dial takes
// at most DialTimeout, the answer's header at most HeaderTimeout (the feed sends it at once),
// and a stream whose peer is gone is found by TCP keep-alive within about 30 s. Without them a
// dial to an address nothing answers waits for the kernel's SYN retries (about two minutes),
// and a stream of a vanished pod for its keep-alive defaults (minutes).
const (
	DialTimeout   = 5 * time.Second
	HeaderTimeout = 10 * time.Second
)

// newTransport is the client's transport, with no proxy (sandbox pods are reached at their IPs).
func newTransport(dial, header time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dial, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}}
	return &http.Transport{Proxy: nil, DialContext: d.DialContext, ResponseHeaderTimeout: header, MaxIdleConnsPerHost: 1}
}
