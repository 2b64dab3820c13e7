// Package lsp is a small client of the Language Server Protocol, for sandboxd's
// navigation tools. It needs nothing of the server.
package lsp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// A small client of the Language Server Protocol: JSON-RPC 2.0 messages
// framed by a Content-Length header, over the server's stdin and stdout. It
// speaks only what the navigation tools need (initialize, didOpen, didClose,
// didChangeWatchedFiles, definition, references, rename, shutdown, exit) and
// answers the server's own requests with an empty result.

// lspMaxMessageBytes bounds one message read from the server: a server that
// announces more is treated as broken.
const lspMaxMessageBytes = 64 << 20

// ErrClosed is the error of a call on a connection whose server is gone.
var ErrClosed = errors.New("the language server closed its output")

// Conn is one connection to a language server.
type Conn struct {
	wmu sync.Mutex
	w   io.Writer

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan lspResponse
	err     error         // why the connection ended; under mu
	done    chan struct{} // closed when the reader stops
}

// lspResponse is a server's answer to one of our requests.
type lspResponse struct {
	result json.RawMessage
	err    error
}

// Message is any JSON-RPC message, as read.
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Error is a JSON-RPC error object.
type Error struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s (code %d)", e.Message, e.Code) }

// NewConn starts reading the server's messages from r; requests are
// written to w. The reader stops at the end of r or on a broken message.
func NewConn(r io.Reader, w io.Writer) *Conn {
	c := &Conn{w: w, pending: make(map[int64]chan lspResponse), done: make(chan struct{})}
	go c.readLoop(bufio.NewReaderSize(r, 64<<10))
	return c
}

// Call sends a request and waits for its answer, decoded into result (when
// it is not nil), or until ctx ends.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := c.nextID
	ch := make(chan lspResponse, 1)
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		return err
	}
	select {
	case resp := <-ch:
		if resp.err != nil {
			return resp.err
		}
		if result == nil || len(resp.result) == 0 {
			return nil
		}
		if err := json.Unmarshal(resp.result, result); err != nil {
			return fmt.Errorf("decoding the answer to %s: %v", method, err)
		}
		return nil
	case <-ctx.Done():
		_ = c.Notify("$/cancelRequest", map[string]any{"id": id})
		return ctx.Err()
	}
}

// Notify sends a notification.
func (c *Conn) Notify(method string, params any) error {
	return c.send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
}

// send writes one framed message.
func (c *Conn) send(msg any) error {
	body, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := fmt.Fprintf(c.w, "Content-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		return fmt.Errorf("writing to the language server: %v", err)
	}
	return nil
}

// Closed is Closed when the server's output has ended.
func (c *Conn) Closed() <-chan struct{} { return c.done }

// readLoop dispatches the server's messages until its output ends.
func (c *Conn) readLoop(r *bufio.Reader) {
	var err error
	for {
		var body []byte
		if body, err = ReadFrame(r); err != nil {
			break
		}
		var msg Message
		if json.Unmarshal(body, &msg) != nil {
			continue // not JSON-RPC: ignored
		}
		switch {
		case msg.Method != "" && len(msg.ID) > 0:
			c.answerServerRequest(msg)
		case msg.Method != "":
			// A notification (logs, progress, diagnostics): not needed.
		case len(msg.ID) > 0:
			c.deliver(msg)
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		err = ErrClosed
	}
	c.mu.Lock()
	c.err = err
	for id, ch := range c.pending {
		ch <- lspResponse{err: err}
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

// deliver hands a response to the call that waits for it.
func (c *Conn) deliver(msg Message) {
	id, err := strconv.ParseInt(string(msg.ID), 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	ch, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !ok {
		return // a call that gave up
	}
	if msg.Error != nil {
		ch <- lspResponse{err: msg.Error}
		return
	}
	ch <- lspResponse{result: msg.Result}
}

// answerServerRequest answers a request of the server: an array of nulls
// for workspace/configuration (no settings), else a null result, which is
// what the server gets for capabilities the client does not have.
func (c *Conn) answerServerRequest(msg Message) {
	var result any
	if msg.Method == "workspace/configuration" {
		var p struct {
			Items []json.RawMessage `json:"items"`
		}
		_ = json.Unmarshal(msg.Params, &p)
		result = make([]any, len(p.Items))
	}
	go func() { _ = c.send(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": result}) }()
}

// ReadFrame reads one message: headers up to an empty line, then
// Content-Length bytes.
func ReadFrame(r *bufio.Reader) ([]byte, error) {
	length := -1
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if length < 0 {
				continue // stray blank line before the headers
			}
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || len(line) > 1024 {
			return nil, fmt.Errorf("malformed header %q from the language server", line)
		}
		if strings.EqualFold(strings.TrimSpace(name), "Content-Length") {
			n, err := strconv.Atoi(strings.TrimSpace(value))
			if err != nil || n < 0 || n > lspMaxMessageBytes {
				return nil, fmt.Errorf("the language server sent a message of length %q (at most %d bytes are read)", strings.TrimSpace(value), lspMaxMessageBytes)
			}
			length = n
		}
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(body), nil
}
