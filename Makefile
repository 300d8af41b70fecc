# Berth: bare `make` prints this help.
SHELL := /bin/bash
.DEFAULT_GOAL := help

MODULES := broker gateway services billing flagenv quotas migrations e2e testenv bench infra/helm/chartcheck infra/images
PKGS    := $(foreach m,$(MODULES),./$(m)/...)
# The dashboard's Go package, named alone: web/node_modules may hold .go files.
GOPKGS  := $(PKGS) ./web
GO      ?= go
DEV     := infra/dev

export BERTH_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:$(or $(BERTH_PG_PORT),54329)/postgres?sslmode=disable
export BERTH_TEST_REDIS_URL    ?= redis://127.0.0.1:$(or $(BERTH_REDIS_PORT),63790)/0

.PHONY: help run test lint bench bench-repl bench-idle bench-micro bench-backlog bench-replay crash-qos1 crash-qos2 replica-idle replica-crash fault fault-flood fault-repl fuzz dev-up dev-down build images clean web web-deps web-perf

help: ## show this help
	@echo "Berth: multi-tenant hosted MQTT."
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

run: ## run the whole stack locally (Postgres, Redis, api, broker node, gateway) with a demo credential
	@$(DEV)/run.sh

test: web ## run every module's tests with -race against a private Postgres and Redis (stopped after, if it started them), then the dashboard's
	@$(DEV)/with-services.sh $(GO) test -race -count=1 -timeout 15m $(GOPKGS)
	cd web && npm test

lint: ## gofmt, go vet and staticcheck over every module
	@out=$$(gofmt -l $(MODULES) web/*.go); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(GOPKGS)
	@$(DEV)/staticcheck.sh $(GOPKGS)
	@# The Linux-only paths (epoll, sendfile, the SYN filter) keep portable fallbacks: a developer on macOS builds too.
	GOOS=darwin $(GO) build $(GOPKGS)

bench: ## Berth vs mosquitto, mochi-mqtt and NATS on loopback, one table in bench/results/ (BENCH_FLAGS=-quick: smoke run)
	@bench/run.sh $(BENCH_FLAGS)

bench-repl: ## QoS 1 ingest (node CPU per million) and latency at 1,000 msg/s, R3 (pro) against R1 (free) in alternating rounds, 3 node processes via the gateway (BENCH_FSYNC, BENCH_FLAGS=-quick)
	@bench/repl.sh $(BENCH_FLAGS)

bench-idle: ## RSS per idle connection, Berth beside mosquitto, at IDLE_CONNS held connections (default 10000,100000; needs RLIMIT_NOFILE above the largest)
	@BENCH_BROKERS=berth,mosquitto bench/run.sh -only '^conn-' -conns $(or $(IDLE_CONNS),10000,100000) $(BENCH_FLAGS)

bench-micro: ## codec, topic, WAL, fan-out and quota micro-benchmarks (-benchmem)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 500ms ./broker/... ./gateway/...

bench-backlog: ## heap of 100,000 offline persistent sessions with 1,000,000 pending messages between them
	cd broker && $(GO) test -run '^$$' -bench BenchmarkOfflineBacklog -benchtime 1x ./internal/shard -backlog-sessions 100000 -backlog-pending 1000000

bench-replay: ## a persistent session back to a backlog of 1,000,000 logged messages: replay msg/s and CPU, sendfile and buffered copy
	cd broker && $(GO) test -run '^$$' -bench BenchmarkBacklogReplay -benchtime 1x -timeout 20m ./internal/shard -replay-backlog 1000000

crash-qos1: ## QoS 1: 20 SIGKILLs of the standalone broker (default flags + -data, and -fsync always) under 4 pipelined publishers; make test runs 4 short ones
	cd broker && $(GO) test -race -count=1 -run TestCrashLoop -v ./cmd/broker -crash-cycles 20 -crash-most 20000

crash-qos2: ## QoS 2 exactly-once across 20 SIGKILLs of the standalone broker (-data, -fsync always); make test runs 5 short ones
	cd broker && $(GO) test -race -count=1 -run TestQoS2CrashLoop -v ./cmd/broker -qos2-crash-cycles 20 -qos2-crash-most 5000

replica-idle: ## CPU of 1,000 idle tenants' Raft groups on 3 nodes (quiesced, ticking, and per-bucket), no -race
	cd broker && $(GO) test -count=1 -timeout 10m -run TestIdleGroupsCPU -v ./internal/replica -idle-groups 1000 -idle-window 5s -idle-compare

replica-crash: ## 10 SIGKILLs of the leader process of 3 replica node processes under load, test and production timing; failover times
	cd broker && $(GO) test -race -count=1 -timeout 10m -run TestLeaderProcessKilled -v ./internal/replica -proc-cycles 10

fault: dev-up ## the e2e fault suite, its node-crash loop at FAULT_CYCLES (default 50) SIGKILLs
	BERTH_FAULT_CYCLES=$(or $(FAULT_CYCLES),50) $(GO) test -race -count=1 -timeout 30m -run TestFault -v ./e2e/

fault-flood: dev-up ## the connect flood in FLOOD_ROUNDS (default 10) rounds of alone, flood, FLOOD_FOR (default 3s) each, p50/p99 per round and pooled; FLOOD_COMPARE=<gateway binary> alternates another build (root; no -race)
	BERTH_FLOOD_ROUNDS=$(or $(FLOOD_ROUNDS),10) BERTH_FLOOD_FOR=$(or $(FLOOD_FOR),3s) BERTH_FLOOD_COMPARE_GATEWAY=$(FLOOD_COMPARE) \
		$(GO) test -count=1 -timeout 60m -run 'TestFaultConnectFlood$$' -v ./e2e/

fault-repl: dev-up ## the replication e2e cases (3 node processes via the gateway: leader SIGKILL, SIGSTOP, drain), REPL_CYCLES (default 10) leader kills; make test runs 3
	BERTH_REPL_CYCLES=$(or $(REPL_CYCLES),10) $(GO) test -race -count=1 -timeout 30m -run TestReplication -v ./e2e/

fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	@$(DEV)/fuzz.sh $(or $(FUZZTIME),30s)

web-perf: web dev-up ## the dashboard's perf specs with their time budgets asserted (a quiet machine; make test only reports the times)
	BERTH_PERF_BUDGETS=1 $(GO) test -count=1 -timeout 20m -run 'TestDashboardInChromium/perf' -v ./e2e/

web-deps: ## install the dashboard's npm packages (npm ci) and chromium for its browser tests
	@$(DEV)/web-deps.sh

web: web-deps ## build the dashboard into web/dist, which the API binary embeds
	cd web && npm run build

build: ## build every binary into .run/bin (the API embeds web/dist as it is: `make web` first for the dashboard)
	@mkdir -p .run/bin
	@for m in $(MODULES); do for d in $$m/cmd/*/; do [ -d "$$d" ] || continue; \
		$(GO) build -o .run/bin/ ./$$d || exit 1; done; done
	@ls .run/bin

# Image stamps: the tag (and each binary's -version), the revision and source labels, and
# the one timestamp in every image (the commit's time: same commit, same digests).
IMAGE_TAG         ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
IMAGE_REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_SOURCE      ?= $(or $(shell git config --get remote.origin.url 2>/dev/null),https://berth.dev)
IMAGE_ARCH        ?= amd64
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

images: web ## build the OCI images (berth-api, -gateway, -node, -billing, -migrate) into .run/images without a Docker daemon (IMAGE_TAG, IMAGE_ARCH)
	@. $(DEV)/lib.sh && apt_install ca-certificates
	$(GO) run ./infra/images/cmd/images -out .run/images -tag $(IMAGE_TAG) -revision $(IMAGE_REVISION) \
		-source $(IMAGE_SOURCE) -created $(SOURCE_DATE_EPOCH) -arch $(IMAGE_ARCH)

dev-up: ## start the private Postgres (:54329) and Redis (:63790), installing what is missing
	@$(DEV)/up.sh

dev-down: ## stop them (their data stays in .run/)
	@$(DEV)/down.sh

clean: dev-down ## stop the dev services and delete .run/ (all local data)
	rm -rf .run
