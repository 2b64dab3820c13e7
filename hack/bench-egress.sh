#!/usr/bin/env bash
# make bench-egress: the egress gateway side by side with a direct TLS connection, a plain Go TCP
# relay (the floor of any extra hop) and, when they are installed, tinyproxy and squid (Debian:
# apt-get install tinyproxy squid) as CONNECT proxies on loopback, in one run: TLS connection
# setup (mean, p50, p90), a 100 MiB download (MB/s; the side-by-side run takes every path in turn
# each round and prints the ratios from that run) and the gateway's memory per idle tunnel.
# Figures depend on the machine and its load: the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

wait_port() {
	for _ in $(seq 50); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on 127.0.0.1:$1" >&2
	return 1
}

proxies=()
if command -v tinyproxy >/dev/null; then
	port=$(free_port)
	cat >"$work/tinyproxy.conf" <<CONF
Port $port
Listen 127.0.0.1
MaxClients 1000
LogLevel Critical
CONF
	tinyproxy -d -c "$work/tinyproxy.conf" &
	pids+=($!)
	wait_port "$port"
	proxies+=("tinyproxy=http://127.0.0.1:$port")
	echo "comparing with $(tinyproxy -v 2>&1 | head -1) on 127.0.0.1:$port"
else
	echo "tinyproxy is not installed (apt-get install tinyproxy)"
fi
squid_bin=$(command -v squid || true)
[[ -z "$squid_bin" && -x /usr/sbin/squid ]] && squid_bin=/usr/sbin/squid
if [[ -n "$squid_bin" ]]; then
	port=$(free_port)
	chmod 0777 "$work"
	# CONNECT only, from loopback, no cache, no logs, no pinger: a tunnel and nothing else.
	cat >"$work/squid.conf" <<CONF
http_port 127.0.0.1:$port
acl loopback src 127.0.0.1/32
acl CONNECT method CONNECT
http_access allow loopback CONNECT
http_access deny all
cache deny all
access_log none
cache_log /dev/null
cache_store_log none
pinger_enable off
pid_filename $work/squid.pid
coredump_dir $work
shutdown_lifetime 0 seconds
CONF
	"$squid_bin" -N -f "$work/squid.conf" 2>/dev/null &
	pids+=($!)
	wait_port "$port"
	proxies+=("squid=http://127.0.0.1:$port")
	echo "comparing with $("$squid_bin" -v | head -1) on 127.0.0.1:$port"
else
	echo "squid is not installed (apt-get install squid)"
fi
EGRESS_BENCH_PROXY=$(IFS=,; echo "${proxies[*]}")
export EGRESS_BENCH_PROXY

echo "load average before: $(cat /proc/loadavg)"
go test -run '^$' -bench 'BenchmarkConnectSetup' -benchtime 2000x ./pkg/egress/
go test -run '^$' -bench 'BenchmarkDownload$' -benchtime 10x ./pkg/egress/
echo "load average: $(cat /proc/loadavg)"
go test -run '^$' -bench 'BenchmarkDownloadSideBySide' -benchtime 25x ./pkg/egress/
go test -run '^$' -bench 'BenchmarkIdleTunnelMemory' -benchtime 7x ./pkg/egress/
echo "load average after: $(cat /proc/loadavg)"
