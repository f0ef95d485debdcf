# occkit's one test command is `make test`: on a fresh Debian machine with Go
# it installs what is missing, starts the servers the tests need on free
# loopback ports, runs the checks and every test with the race detector, and
# stops what it started. See scripts/test.sh.

STATICCHECK_VERSION := v0.8.2
BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

.PHONY: test tools lint unit bench

test:
	bash scripts/test.sh

tools:
	bash scripts/ensure-tools.sh

lint: tools
	bash scripts/lint.sh

# unit runs the Go tests without starting servers (tests that need one fail
# loudly and say which environment variable they miss).
unit:
	go test -race ./...
	for d in $$(bash scripts/modules.sh); do (cd $$d && GOWORK=off GOFLAGS=-mod=mod go test -race ./...) || exit 1; done

# bench runs the occ micro-benchmarks; see docs/benchmarks.md.
bench:
	go test -run '^$$' -bench . -benchmem -count 6 ./occ/

# fuzz runs every fuzz target of the root module for FUZZTIME each (10s
# by default; FUZZ=regexp picks targets), one after another, looking for
# new failing inputs; make test replays only the seed corpora. See
# docs/testing.md.
FUZZTIME ?= 10s
.PHONY: fuzz
fuzz:
	FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

# faults runs counter increments (occ.Update) and transfers (occ.Txn) on
# every backend it can start while a fault strikes (dropped connections,
# latency, answers cut mid-response, PostgreSQL, MariaDB and Redis restarts, etcd
# leader loss), and hybrid.Update increments while lease holders pause past
# their TTL or their clocks jump; checks that nothing was lost or doubled,
# that no stale write was accepted and that every recorded history is
# linearizable (porcupine), and writes $(OUT)/faults.json; see
# docs/reliability.md. It takes about 5 minutes (at most 10).
OUT ?= ./faults-out
.PHONY: faults
faults:
	go run ./benchmarks/cmd/occfaults --out $(OUT)
