package tracing

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// otlpClient sends the SDK's OTLP exporter's batches (otlptrace.Client) as an OTLP
// ExportTraceServiceRequest in protobuf, over HTTP (POST /v1/traces) or gRPC (the unary
// TraceService/Export over HTTP/2, plain text with prior knowledge or TLS).
//
// Why not the SDK's otlptracehttp and otlptracegrpc clients: both link google.golang.org/grpc and
// with it golang.org/x/net/trace's html/template, which took the operator's binary (the gateway's
// too: one image) from 38.6 to 62.1 MB (stripped); with this client it is 39.3 MB. It is the
// exporter's wire only: the SDK's otlptrace exporter still turns spans into OTLP
// (docs/record.md §1). It does not retry: a batch that fails is dropped and the SDK reports
// it, as the batch processor drops spans when its queue is full.
type otlpClient struct {
	protocol string
	base     string // scheme://host:port
	hc       *http.Client
}

// otlpTimeout bounds one export.
const otlpTimeout = 10 * time.Second

// The paths of OTLP's trace export.
const (
	otlpHTTPPath = "/v1/traces"
	otlpGRPCPath = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
)

func newOTLPClient(protocol, host string, insecure bool) *otlpClient {
	tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: protocol == ProtocolGRPC}
	scheme := "https"
	if insecure {
		scheme = "http"
	}
	if protocol == ProtocolGRPC {
		tr.Protocols = new(http.Protocols)
		if insecure {
			tr.Protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge, as gRPC speaks it
		} else {
			tr.Protocols.SetHTTP2(true)
		}
	}
	return &otlpClient{protocol: protocol, base: scheme + "://" + host, hc: &http.Client{Transport: tr, Timeout: otlpTimeout}}
}

func (c *otlpClient) Start(context.Context) error { return nil }

func (c *otlpClient) Stop(context.Context) error {
	c.hc.CloseIdleConnections()
	return nil
}

// exportRequest is the protobuf encoding of an ExportTraceServiceRequest: its one field,
// resource_spans (1), repeated.
func exportRequest(spans []*tracepb.ResourceSpans) ([]byte, error) {
	var b []byte
	for _, rs := range spans {
		m, err := proto.Marshal(rs)
		if err != nil {
			return nil, err
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b, nil
}

func (c *otlpClient) UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error {
	msg, err := exportRequest(spans)
	if err != nil {
		return err
	}
	if c.protocol == ProtocolGRPC {
		return c.uploadGRPC(ctx, msg)
	}
	return c.uploadHTTP(ctx, msg)
}

func (c *otlpClient) uploadHTTP(ctx context.Context, msg []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+otlpHTTPPath, bytes.NewReader(msg))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP/HTTP export: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("OTLP/HTTP export: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (c *otlpClient) uploadGRPC(ctx context.Context, msg []byte) error {
	frame := make([]byte, 5, 5+len(msg)) // uncompressed, 4-byte big-endian length
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+otlpGRPCPath, bytes.NewReader(frame))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP/gRPC export: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // the response message; trailers follow
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("OTLP/gRPC export: HTTP %s", resp.Status)
	}
	status, message := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if status == "" { // a trailers-only answer puts them in the headers
		status, message = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	if status != "0" {
		return fmt.Errorf("OTLP/gRPC export: grpc-status %q: %s", status, message)
	}
	return nil
}
