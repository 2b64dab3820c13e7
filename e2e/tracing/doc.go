// Package tracing holds tests only (build tag e2e): one trace through a real collector (issue
// 42 part 1, docs/record.md §1). The test starts the real Jaeger binary from bin/ (built from
// its pin by `hack/build-cluster-bins.sh jaeger`), and in process a sandboxd, an egress gateway
// exporting its spans over OTLP, and pkg/recordtrace exporting sandboxd's record entries as the
// leader does; a runtime's tool calls carry a traceparent, and one query by trace id to Jaeger's
// query API must find the Bash call's span parenting the gateway's egress span, and the Write's
// span with its file. It needs no cluster.
package tracing
