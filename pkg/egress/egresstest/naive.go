// Package egresstest is test support for the egress gateway's tests, in process (pkg/egress)
// and through the real binary (e2e/egressbin): an upstream that frames HTTP/1.1 naively, as the
// servers that issue 39's smuggling and echo findings abuse do. Tests import it; nothing else may
// (hack/layout).
package egresstest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// ServeNaive answers the HTTP/1.1 requests on c until it closes, framing them naively: it reads
// a body only for POST and PUT (by Content-Length), never for GET (whatever its Content-Length
// says), and not at all for a path with /early (it answers before reading it), so the bytes it
// did not read are its next request. It answers each request with a Content-Length: /continue
// with a 100 Continue first, /stream with StreamBody of the request's Authorization (chunked),
// /echo and TRACE with the request's head and body (and its Authorization in X-Echo), HEAD with
// nothing, else "answer METHOD path". seen is told "METHOD path auth=<Authorization>" of each.
func ServeNaive(c net.Conn, seen func(string)) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		tp := textproto.NewReader(br)
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		hdr, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		method, rest, _ := strings.Cut(line, " ")
		path, _, _ := strings.Cut(rest, " ")
		seen(method + " " + path + " auth=" + hdr.Get("Authorization"))
		var body []byte
		if (method == "POST" || method == "PUT") && !strings.Contains(path, "/early") {
			n, _ := strconv.Atoi(hdr.Get("Content-Length"))
			body = make([]byte, n)
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
		}
		if err := answer(c, method, path, line, hdr, body); err != nil {
			return
		}
	}
}

func answer(c net.Conn, method, path, line string, hdr textproto.MIMEHeader, body []byte) error {
	text, extra := "answer "+method+" "+path, ""
	switch {
	case method == "HEAD":
		text = ""
	case strings.Contains(path, "/continue"):
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return err
		}
	case strings.Contains(path, "/stream"):
		return writeStream(c, hdr.Get("Authorization"))
	case strings.Contains(path, "/echo") || method == "TRACE":
		var head strings.Builder
		head.WriteString(line + "\r\n")
		_ = http.Header(hdr).Write(&head)
		text = head.String() + string(body)
		extra = "X-Echo: " + hdr.Get("Authorization") + "\r\n"
	}
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", extra, len(text), text)
	return err
}

// StreamCuts are the offsets at which StreamBody's answer is cut into chunks, each inside a copy
// of the credential: around the buffer sizes a relay reads with (4, 16, 32 and 64 KiB) and past.
var StreamCuts = []int{4096, 16384, 32768, 65536, 100000}

// StreamBody is filler with a copy of auth across each cut, and auth's token (after its scheme)
// once more at the end.
func StreamBody(auth string) string {
	var b strings.Builder
	for _, cut := range StreamCuts {
		b.WriteString(strings.Repeat("a", cut-len(auth)/2-b.Len()))
		b.WriteString(auth)
	}
	_, token, _ := strings.Cut(auth, " ")
	b.WriteString(" then the token alone: " + token + " end")
	return b.String()
}

// writeStream answers with StreamBody(auth), chunked, one write per chunk, each chunk ending at a
// cut (so inside a copy of the credential).
func writeStream(c net.Conn, auth string) error {
	body := StreamBody(auth)
	if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Echo: %s\r\nTransfer-Encoding: chunked\r\n\r\n", auth); err != nil {
		return err
	}
	from := 0
	for _, cut := range append(slices.Clone(StreamCuts), len(body)) {
		if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", cut-from, body[from:cut]); err != nil {
			return err
		}
		from = cut
	}
	_, err := io.WriteString(c, "0\r\n\r\n")
	return err
}
