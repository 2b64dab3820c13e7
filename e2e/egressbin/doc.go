// Package egressbin holds tests only: the egress gateway's terminated-tunnel techniques of issue
// 39 (docs/egress.md, "Bypass techniques", rows proven "binary") reproduced through the real
// `airlock egress` binary, built from this module by the tests' TestMain into a temporary
// directory and run as a process with --claims-file, against upstreams of the test on this
// machine's own non-loopback address (the gateway refuses loopback answers whatever a rule says)
// and a test resolver it is pointed at (--dns-server). pkg/egress proves the same in process
// (TestTerminatedTechniques); this proves it of what is shipped: the flags, the credential files
// read from --credentials-dir, the metrics port.
package egressbin
