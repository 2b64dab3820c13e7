package wire

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// keptWriter is the ResponseWriter of a request served on a kept
// connection (keepalive.go): it holds the answer, which the loop writes
// with its length in one write, as net/http writes an answer whose length
// it knows. The transport sets handBack, writing nothing, for a request
// that is not a direct session call: net/http serves that one.
type keptWriter struct {
	header   http.Header
	status   int
	body     []byte
	handBack bool
}

func newKeptWriter() *keptWriter { return &keptWriter{header: make(http.Header, 4)} }

func (w *keptWriter) Header() http.Header { return w.header }

func (w *keptWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *keptWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// closes reports whether the answer says the connection ends after it.
func (w *keptWriter) closes() bool {
	for _, v := range w.header["Connection"] {
		if strings.EqualFold(strings.TrimSpace(v), "close") {
			return true
		}
	}
	return false
}

// writeTo writes the answer through w (a connection that was not taken).
func (w *keptWriter) writeTo(rw http.ResponseWriter) {
	h := rw.Header()
	for k, v := range w.header {
		h[k] = v
	}
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	rw.WriteHeader(status)
	rw.Write(w.body)
}

// appendResponse appends the answer as HTTP/1.1 to dst, as net/http
// writes an answer the handler wrote whole: the status line, the
// handler's headers, a Date (unless the handler set one), the body's
// length where the status allows a body (and the sniffed Content-Type if
// the handler set none), then the body.
func (w *keptWriter) appendResponse(dst []byte, now time.Time) []byte {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	dst = append(dst, "HTTP/1.1 "...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	dst = append(dst, http.StatusText(status)...)
	dst = append(dst, "\r\n"...)
	h := w.header
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{now.UTC().Format(http.TimeFormat)}
	}
	body := w.body
	if bodyAllowed(status) {
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
		if _, ok := h["Content-Type"]; !ok && len(body) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(body)}
		}
	} else {
		delete(h, "Content-Length")
		body = nil
	}
	aw := appendWriter{dst}
	_ = h.Write(&aw)
	dst = append(aw.b, "\r\n"...)
	return append(dst, body...)
}

// bodyAllowed reports whether an answer of status may have a body.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

// appendWriter appends what is written to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// validHost is net/http's server's check of a request's Host.
func validHost(host string) bool { return host != "" && httpguts.ValidHostHeader(host) }

// validHeader is net/http's server's check of a request's header names and
// values.
func validHeader(h http.Header) bool {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}
