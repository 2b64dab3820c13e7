#!/usr/bin/env bash
# make bench-egress: the egress gateway side by side with a direct TLS connection and, when it is
# installed, tinyproxy (Debian: apt-get install tinyproxy) on loopback, in one run: TLS connection
# setup (mean, p50, p90), a 100 MiB download (MB/s) and the gateway's memory per idle tunnel.
# Figures depend on the machine and its load: the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
proxy_pid=
cleanup() {
	if [[ -n "$proxy_pid" ]]; then kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

export EGRESS_BENCH_PROXY=
if command -v tinyproxy >/dev/null; then
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	cat >"$work/tinyproxy.conf" <<CONF
Port $port
Listen 127.0.0.1
MaxClients 1000
LogLevel Critical
CONF
	tinyproxy -d -c "$work/tinyproxy.conf" &
	proxy_pid=$!
	for _ in $(seq 50); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
		sleep 0.1
	done
	export EGRESS_BENCH_PROXY="http://127.0.0.1:$port"
	echo "comparing with $(tinyproxy -v 2>&1 | head -1) on $EGRESS_BENCH_PROXY"
else
	echo "tinyproxy is not installed (apt-get install tinyproxy): the gateway against direct connections only"
fi

echo "load average before: $(cat /proc/loadavg)"
go test -run '^$' -bench 'BenchmarkConnectSetup' -benchtime 2000x ./pkg/egress/
go test -run '^$' -bench 'BenchmarkDownload' -benchtime 10x ./pkg/egress/
go test -run '^$' -bench 'BenchmarkIdleTunnelMemory' -benchtime 3x ./pkg/egress/
echo "load average after: $(cat /proc/loadavg)"
