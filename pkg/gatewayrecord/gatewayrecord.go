// Package gatewayrecord is the operator's read of the egress gateway's decisions
// (docs/record.md §2.1): the wire of the gateway's GET /decisions and the client that follows
// it. The leader reads each gateway pod at its address on the decisions port, with the token
// derived from the proxy key for this read only (claimtoken.DecisionsReaderToken); sandboxes
// cannot reach that port, and the token opens nothing else.
package gatewayrecord

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Path is the gateway's endpoint of the decisions (GET only).
const Path = "/decisions"

// BootHeader carries the boot id of the gateway's log that answers.
const BootHeader = "Airlock-Decisions-Boot"

// maxLine bounds one line (record.MaxLineBytes).
const maxLine = 1 << 20

// BootChangedError says that the gateway restarted: the log that answers is boot Boot, not the
// one asked for. What the earlier boot had not handed over is gone; read Boot from 0.
type BootChangedError struct{ Boot string }

func (e *BootChangedError) Error() string {
	return fmt.Sprintf("the egress gateway restarted: its decisions are now boot %q", e.Boot)
}

// ErrCut is a stream that ended: the feed has no last entry, so every end is a cut; read again
// from the cursor.
var ErrCut = errors.New("the decisions stream ended")

// Client reads gateways' decisions over HTTP.
type Client struct {
	HTTP *http.Client
}

// NewClient returns a client with no proxy (gateway pods are reached at their IPs) and no
// overall timeout (a claim's decisions are read for the claim's life; ctx ends it).
func NewClient() *Client {
	return &Client{HTTP: &http.Client{Transport: newTransport(DialTimeout, HeaderTimeout)}}
}

// Follow reads the decisions of the claim uid from the gateway at base (e.g.
// http://10.0.0.9:8082) with the reader's token, from the entry after sequence number after of
// boot (boot "" and after 0: from the start of whatever boot answers), and calls onBoot with the
// boot that answers, then take with each line as it comes, in order. It returns a
// *BootChangedError when the gateway restarted, ErrCut when the stream ended, take's error, or
// ctx's.
func (c *Client) Follow(ctx context.Context, base, token, uid, boot string, after uint64, onBoot func(string), take func(line []byte) error) error {
	q := url.Values{"claim": {uid}, "after": {strconv.FormatUint(after, 10)}, "follow": {"1"}}
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
	if onBoot != nil {
		onBoot(resp.Header.Get(BootHeader))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 16<<10), maxLine)
	for sc.Scan() {
		if err := take(sc.Bytes()); err != nil {
			return err
		}
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
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

// newTransport is the client's transport, with no proxy (gateway pods are reached at their IPs).
func newTransport(dial, header time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dial, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}}
	return &http.Transport{Proxy: nil, DialContext: d.DialContext, ResponseHeaderTimeout: header, MaxIdleConnsPerHost: 4}
}
