# airlock. The two commands a newcomer needs: `make run` and `make test` (see README.md).
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/airlock-dev/airlock/pkg/version.version=$(VERSION) -X github.com/airlock-dev/airlock/pkg/version.commit=$(COMMIT)

# Where hack/build-cluster-bins.sh puts the pinned binaries (helm, kubectl, the control plane's).
BIN_DIR ?= $(or $(AIRLOCK_BIN_DIR),$(CURDIR)/bin)

.PHONY: all
all: build

.PHONY: build
build: ## Build bin/airlock.
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/airlock .

.PHONY: run
run: ## As root: a real node, airlock installed in-cluster and a short demo; elsewhere the API-only plane with the operator as a local process.
	hack/run.sh

.PHONY: test
test: test-unit test-clients test-mcpclients test-conformance test-monitoring verify e2e e2e-node-if-possible ## Everything CI runs: unit tests, the Python and TypeScript clients, third-party MCP clients, generated-code and lint checks, e2e on the local control plane, and on a real node where the machine can run one (root).

.PHONY: test-unit
test-unit: ## Unit tests of the main module (helm and kubectl are built first, for the chart tests of manifests/).
	AIRLOCK_BIN_DIR=$(BIN_DIR) hack/build-cluster-bins.sh helm kubectl
	AIRLOCK_BIN_DIR=$(BIN_DIR) go test -count=1 ./...

.PHONY: test-clients
test-clients: ## The runtime clients in Python and TypeScript (clients/test.sh): python3 -m unittest in clients/python; npm ci into _output/clients-typescript, tsc and node --test with Node.js 22 from npm (pinned in clients/typescript). The Go client, pkg/client, is in test-unit.
	clients/test.sh

.PHONY: test-mcpclients
test-mcpclients: ## sandboxd against third-party MCP clients pinned in their own module (Go SDK v1.6.1, npm Inspector CLI); the conformance suite is test-conformance.
	cd e2e/mcpclients && go test -count=1 $$(go list ./... | grep -v '/conformance$$')

.PHONY: test-conformance
test-conformance: ## The official MCP conformance suite (npm @modelcontextprotocol/conformance and Node.js 22, pinned in e2e/mcpclients/conformance, npm ci into _output/conformance; its 0.2.0 alpha for 2026-07-28 in conformance/2026-07-28) against a real sandboxd, every revision it tests; a failure not in its expected-failures.yaml fails.
	cd e2e/mcpclients && go test -count=1 ./conformance/

.PHONY: test-monitoring
test-monitoring: ## The chart's alert rules and dashboard with Prometheus's libraries, in their own module (e2e/monitoring): PromQL parses, every metric exists, every alert has a runbook and fires on its problem only.
	cd e2e/monitoring && GOWORK=off go test -count=1 ./...

.PHONY: verify
verify: verify-chart ## No tracked file over 1 MiB (build outputs stay out of git), generated code and CRDs up to date (checked with an empty module cache, as on a fresh machine), the Helm chart, gofmt, go vet.
	hack/verify-file-sizes.sh
	hack/verify-codegen.sh --cold
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^pkg/generated/')); \
	  if [[ -n "$$unformatted" ]]; then echo "gofmt would change: $$unformatted" >&2; exit 1; fi
	go vet ./...
	go vet -tags sandboxd_only ./...
	go test -count=1 -tags sandboxd_only ./pkg/cmd/
	go vet -tags e2e ./e2e/...
	go vet -tags 'e2e realnode' ./e2e/...
	cd e2e/mcpclients && go vet ./...
	cd e2e/monitoring && GOWORK=off go vet ./...

.PHONY: verify-chart
verify-chart: ## The Helm chart: helm lint --strict, and its render with default values equals `kubectl kustomize manifests/` (manifests/chart_test.go; helm and kubectl built into bin/).
	AIRLOCK_BIN_DIR=$(BIN_DIR) hack/build-cluster-bins.sh helm kubectl
	$(BIN_DIR)/helm lint --strict manifests/chart/airlock
	AIRLOCK_BIN_DIR=$(BIN_DIR) go test -count=1 -run 'Chart|Schema|CompareInstalls' ./manifests/

.PHONY: verify-codegen
verify-codegen: ## Generated code and CRDs up to date, with this machine's module cache (quicker than verify's cold check).
	hack/verify-codegen.sh

.PHONY: codegen
codegen: ## Regenerate clients, listers, informers, deepcopy, register code and CRDs.
	hack/update-codegen.sh

.PHONY: e2e
e2e: ## The e2e suite on a fresh local control plane (built from Go modules), torn down afterwards.
	hack/e2e.sh

.PHONY: e2e-node
e2e-node: ## The e2e suite on real pods: a real single node (needs root), airlock installed in-cluster from its images, torn down afterwards.
	hack/e2e-node.sh

.PHONY: e2e-node-if-possible
e2e-node-if-possible: ## e2e-node where this machine can run a real node (root, br_netfilter); otherwise says why and skips.
	hack/e2e-node.sh --if-possible

.PHONY: e2e-kind
e2e-kind: ## The real-pod e2e suite on a kind cluster, images built from the Dockerfiles (needs Docker and kind).
	hack/e2e-kind.sh

.PHONY: cluster-up cluster-down
cluster-up: ## Start the local control plane (left running).
	hack/local-cluster.sh up
cluster-down: ## Stop the local control plane.
	hack/local-cluster.sh down

.PHONY: bench-sandboxd
bench-sandboxd: ## sandboxd's speed: Read and Bash side by side with an mcp-go server over SSE, and over Streamable HTTP (issue 26 item 4's six ratios with their targets, client=raw the servers' measure, client=sdk the Go SDK's), round trips, a 10k-file snapshot, find_references, RSS at rest, the session record's overhead (a Read's and a Write's p50 with the record off and on, its bytes per call: docs/record.md section 4), the scan of a Bash call's files on 20,000 files (the time it adds per call: docs/record.md section 4) (~5-7 min).
	@echo "load average before: $$(cat /proc/loadavg)"
	go test -run '^$$' -bench BenchmarkSideBySide -benchtime 4000x ./pkg/sandboxd/
	go test -run '^$$' -bench BenchmarkToolCall -benchtime 2s ./pkg/sandboxd/
	go test -run '^$$' -bench 'BenchmarkSnapshotCreate|BenchmarkFindReferences' -benchtime 20x -timeout 20m ./pkg/sandboxd/
	go test -run '^$$' -bench BenchmarkRSSAtRest -benchtime 1x ./pkg/sandboxd/
	go test -run '^$$' -bench BenchmarkRecordOverhead -benchtime 10000x ./pkg/sandboxd/
	go test -run '^$$' -bench BenchmarkBashCallScan -benchtime 200x ./pkg/sandboxd/
	@echo "load average after: $$(cat /proc/loadavg)"

.PHONY: bench-egress
bench-egress: ## The egress gateway side by side with direct TLS, a plain Go relay (the floor), tinyproxy and squid (when installed) on loopback: connection setup, a 100 MiB download (ratios from one run), memory per idle tunnel (hack/bench-egress.sh, ~1 min).
	hack/bench-egress.sh

.PHONY: bench-node
bench-node: ## As root: the real-node figures (hack/e2e-node.sh): acquire latency, and what a kernel of its own costs (cold and warm acquire → first tool result, go build and go test, under runc and gVisor side by side; the evidence's read and signing at bind: docs/isolation.md, "Measured") (~15 min).
	@echo "load average before: $$(cat /proc/loadavg)"
	hack/e2e-node.sh -run '^TestRealNode(AcquireLatency|IsolationCost)$$'
	@echo "load average after: $$(cat /proc/loadavg)"

.PHONY: bench
bench: ## Claim admission and binding under open-loop load on a throwaway API-only plane (hack/bench.sh; BENCH_SCALE=1 adds the scale runs); figures to stdout and _output/bench/, each beside the committed baseline (hack/bench/baseline.json), a scenario more than 25% slower said so; then the peer, agent-sandbox, on a fresh plane and side by side (BENCH_PEER=1 builds it, 0 leaves it out; by default it runs when built).
	hack/bench.sh

.PHONY: bench-baseline
bench-baseline: ## make bench, then its figures replace the committed baseline's (hack/bench/baseline.json; scenarios not run are kept): on purpose, on a quiet machine; commit the file.
	BENCH_WRITE_BASELINE=1 hack/bench.sh

.PHONY: help
help:
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "%-20s %s\n", $$1, $$2}'

# The images' tag is also the version built into them, so that the operator's default --sync-image
# (ghcr.io/airlock-dev/airlock:<its version>) names the image it runs from.
IMAGE_TAG ?= v0.1.0

.PHONY: image
image: ## Build the operator and sandbox images (-go too) with Docker (users with Docker; hack/ builds them without it).
	docker build --build-arg VERSION=$(IMAGE_TAG) --build-arg COMMIT=$(COMMIT) -t ghcr.io/airlock-dev/airlock:$(IMAGE_TAG) .
	docker build --build-arg VERSION=$(IMAGE_TAG) --build-arg COMMIT=$(COMMIT) -f Dockerfile.sandbox --target sandbox -t ghcr.io/airlock-dev/airlock-sandbox:$(IMAGE_TAG) .
	docker build --build-arg VERSION=$(IMAGE_TAG) --build-arg COMMIT=$(COMMIT) -f Dockerfile.sandbox --target sandbox-go -t ghcr.io/airlock-dev/airlock-sandbox:$(IMAGE_TAG)-go .

.PHONY: verify-dockerfiles
verify-dockerfiles: ## As root, without Docker: build the Dockerfiles with buildah on local stand-in base images and check the images by running them (10-23 min, up to ~14 GB in _output/dockerfiles; `hack/verify-dockerfiles.sh clean` frees it).
	VERSION=$(IMAGE_TAG) COMMIT=$(COMMIT) hack/verify-dockerfiles.sh
