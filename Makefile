# pglease — `make help` lists the targets.

GO        ?= go
SQLC      := $(GO) tool -modfile=tools/go.mod sqlc
PKGS      := ./...
PG_CONFIG ?= pg_config
PG_MAJORS ?= 13 14 15 16 17 18
FUZZTIME  ?= 30s
FUZZ_TARGETS := FuzzAcquire FuzzFenced FuzzInterval FuzzClaimSlot FuzzClaimSlots

.DEFAULT_GOAL := help
.PHONY: help demo generate freeze verify lint lint-go lint-sql test test-race test-repeat test-isolation deps \
	install-extension test-compat test-extension bench bench-quick test-matrix test-pgbouncer stress fuzz proof test-failover \
	test-clients test-sharded test-run-margins test-rules test-observability test-cron test-integration \
	chaos-groups model model-core

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk -F':.*## ' '{printf "  %-19s %s\n", $$1, $$2}'

demo: ## Run the demo: migrations, three supervised instances, a crash, a handover
	$(GO) run ./cmd/pglease demo

deps: ## Install the Debian packages the checks need (the only target that installs; root or sudo)
	./scripts/install-deps.sh

generate: ## Regenerate sql/functions/03_row_locks.sql from sql/templates/, the head upgrade (migrations/, extension/) and the proxy (migrations/proxy/) from sql/, and internal/db/ from sql/queries/
	./scripts/gen-rules.sh
	./scripts/gen-schema.sh
	./scripts/gen-proxy.sh
	$(SQLC) generate

freeze: ## Record the checksums of released schema files in sql/released.sha256 (once a version stops being head; never re-records one)
	./scripts/freeze-schema.sh

verify: ## Fail when a released file changed or a generated one (migrations, extension, internal/db) is stale
	./scripts/verify-schema.sh
	./scripts/verify-proxy.sh
	$(SQLC) diff || { echo "verify: internal/db is stale: run make generate" >&2; exit 1; }

lint: lint-go lint-sql ## Run every linter

lint-go: ## gofmt and go vet
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:" $$out >&2; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags proof ./internal/testing/proof/
	$(GO) vet -tags failover ./failover/
	$(GO) vet -tags sharded ./internal/testing/shardtest/
	$(GO) vet -tags observability ./internal/testing/obstest/
	cd bench && $(GO) vet ./...
	cd examples/metrics && $(GO) vet ./...

lint-sql: ## plpgsql_check over every PL/pgSQL function, all warnings on (needs make deps)
	./scripts/lint-sql.sh

test: ## Run the test suite (race detector on) against a real Postgres; names the server, ends with a count
	@$(GO) build -o bin/gotest ./scripts/gotest
	./bin/gotest -race -count=1 $(PKGS)

test-race: test ## Same as test: the suite always runs with -race

N ?= 30
test-repeat: ## Run the suite N times (N=30) beside two CPU-bound processes; prints passes/N, keeps failing logs
	@logs=$$(mktemp -d); pass=0; \
	sh -c 'while :; do :; done' & b1=$$!; sh -c 'while :; do :; done' & b2=$$!; \
	trap 'kill $$b1 $$b2 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	for i in $$(seq 1 $(N)); do \
		if $(GO) test -race -count=1 $(PKGS) >$$logs/run-$$i.log 2>&1; then \
			pass=$$((pass + 1)); rm $$logs/run-$$i.log; echo "test-repeat: run $$i passed"; \
		else \
			echo "test-repeat: run $$i FAILED (log: $$logs/run-$$i.log)"; \
			grep -E '^(--- FAIL|FAIL|panic:)' $$logs/run-$$i.log | head -20; \
		fi; \
	done; \
	echo "test-repeat: $$pass/$(N) passed"; [ $$pass -eq $(N) ]

test-clients: ## The README's psql block, the Python and Node examples (examples/) against a real Postgres
	./scripts/test-clients.sh

test-isolation: ## Interleaving specs of the SQL functions (Postgres' isolation tester)
	./scripts/test-isolation.sh

install-extension: ## Install the extension (extension/) into $(pg_config --sharedir)/extension (needs write access there)
	@dir="$$($(PG_CONFIG) --sharedir)/extension"; \
	if [ ! -w "$$dir" ]; then echo "install-extension: cannot write $$dir: run as a user who can (sudo make install-extension), or set PG_CONFIG" >&2; exit 1; fi; \
	install -m 0644 extension/pglease.control extension/pglease--*.sql "$$dir/" && echo "installed pglease into $$dir"

test-compat: ## The last release's client and SQL contract suites against the head schema (old clients keep working)
	./scripts/test-compat.sh

test-integration: test-extension test-compat test-pgbouncer test-sharded ## The suites that need more than the local server: CREATE EXTENSION, the last release's clients, PgBouncer, PL/Proxy (~7 min; not in CI: run before merging SQL or client changes)

test-differential: ## Head's SQL functions against those of commit BASE (required): the same random calls from two roles, the same results and rows (PGLEASE_DIFF_CALLS per seed, default 1500)
	@[ -n "$(BASE)" ] || { echo "test-differential: name the commit to compare with: make test-differential BASE=<commit>" >&2; exit 2; }
	PGLEASE_DIFF_BASE=$(BASE) $(GO) test -tags differential -count=1 -v ./internal/testing/differential/

test-extension: install-extension ## Run the SQL contract tests against CREATE EXTENSION pglease instead of the migrations
	PGLEASE_TEST_SCHEMA=extension $(GO) test -race -count=1 ./internal/testing/contract/

bench: ## Benchmark pglease against one Postgres (PGLEASE_BENCH_DATABASE_URL); writes BENCHMARKS.md, its plot and bench/results/latest.json
	cd bench && $(GO) run . -out ../BENCHMARKS.md

bench-quick: ## make bench in less time: 1 s per row, slot sweep at C=1 only, 100,000 names in the purge run; writes the same files
	cd bench && $(GO) run . -out ../BENCHMARKS.md -duration 1s -slot-clients 1 -purge-names 100000 -handovers 100 -crash-handovers 20 -cron-runs 800

test-matrix: ## SQL contract and client suites on PostgreSQL $(PG_MAJORS), one throwaway cluster each (server binaries via npm)
	./scripts/test-matrix.sh $(PG_MAJORS)

test-pgbouncer: ## Client and supervisor suites through PgBouncer in transaction pooling mode
	./scripts/test-pgbouncer.sh

proof: ## Reliability tests at CI size, with their figures: history checker, stress, faults, fuzz seeds, secrets
	$(GO) test -tags proof -race -count=1 -v ./internal/testing/history/ ./internal/testing/proof/

stress: ## Long history-checked stress runs: leases and slots, then rate limits (PGLEASE_STRESS_DURATION, PGLEASE_LIMITS_DURATION, default 5m each)
	PGLEASE_STRESS_DURATION=$${PGLEASE_STRESS_DURATION:-5m} $(GO) test -tags proof -race -count=1 -timeout 60m -run '^TestStress$$' -v ./internal/testing/proof/
	PGLEASE_LIMITS_DURATION=$${PGLEASE_LIMITS_DURATION:-5m} $(GO) test -tags proof -race -count=1 -timeout 60m -run '^TestLimitsChaos$$' -v ./internal/testing/proof/

chaos-groups: ## History-checked chaos run of a shard group: 8 worker processes, M=64, joins, leaves, kill -9, backend kills (PGLEASE_GROUPS_DURATION, default 2m)
	PGLEASE_GROUPS_DURATION=$${PGLEASE_GROUPS_DURATION:-2m} $(GO) test -tags proof -race -count=1 -timeout 30m -run '^TestGroupChaos$$' -v ./internal/testing/proof/

model: ## Check the Promela models with spin: shard groups (model/shards.pml) and model-core's (~2 min; needs make deps)
	./scripts/check-model.sh all

model-core: ## Check the Promela model of acquire, renew, release and the local deadline (model/lease.pml), and that each mutant fails (~20 s; needs make deps)
	./scripts/check-model.sh core

fuzz: ## Fuzz every SQL function's arguments, FUZZTIME (30s) per target
	@for f in $(FUZZ_TARGETS); do \
		$(GO) test -tags proof -count=1 -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -parallel 1 ./internal/testing/proof/ || exit 1; \
	done

test-failover: ## Failover tests on a pg_auto_failover formation (root; ~4 min; FAILOVER_FLAGS=-short ~3 min)
	$(GO) test -tags failover -count=1 -v -timeout 20m $(FAILOVER_FLAGS) ./failover/

test-sharded: ## PL/Proxy proxy over four partitions on two throwaway clusters: contract, Go clients, role binding, faults (~1 min; PGLEASE_SHARDED_SUITES=1 adds the unchanged suites)
	./scripts/test-sharded.sh

test-rules: ## Check the Prometheus rules of deploy/prometheus and run their promtool unit tests (needs make deps)
	./scripts/test-observability.sh --rules-only

test-observability: ## The rules, then a real Prometheus scraping pglease exporter through a handover, promtool check metrics, the postgres-exporter queries file (~40 s; PGLEASE_UPDATE_PLOT=1 redraws docs/img/handover.svg)
	./scripts/test-observability.sh

test-run-margins: ## pglease run: margin between the command's last process dying and the server's expiry, RUNS=10 per fault (~3 min)
	@out=$$(mktemp); $(GO) test -race -count=$${RUNS:-10} -run 'TestCLI/Run(Kill9|Crash|Stopped|LeaseLostBlackhole)$$' -v \
		./cmd/pglease/ >$$out 2>&1; rc=$$?; grep -E 'before the server|dead .* later|^(ok|FAIL)|--- FAIL' $$out; rm -f $$out; exit $$rc

test-cron: ## pglease run's fleet test at full size: three hosts, 20 ticks of 12 s, skewed starts, kill -9, --once-per and --hold-at-least (~4 min)
	PGLEASE_CRON_TICKS=20 $(GO) test -race -count=1 -run '^TestCronFleet$$' -v ./cmd/pglease/
