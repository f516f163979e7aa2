# pglease — `make help` lists the targets.

GO      ?= go
SQLC    := $(GO) tool -modfile=tools/go.mod sqlc
PKGS    := ./...

.DEFAULT_GOAL := help
.PHONY: help demo generate verify lint lint-go lint-sql test test-race test-isolation deps

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

demo: ## Run the demo: migrations, three supervised instances, a crash, a handover
	$(GO) run ./cmd/pglease demo

deps: ## Install the Debian packages the checks need (plpgsql_check, pgbouncer)
	./scripts/install-deps.sh

generate: ## Regenerate migrations/ from sql/ and internal/db/ from sql/queries/
	./scripts/gen-migrations.sh
	$(SQLC) generate

verify: ## Fail when generated files (migrations, internal/db) are stale
	@tmp=$$(mktemp -d) && ./scripts/gen-migrations.sh $$tmp && \
		diff -ru --exclude=embed.go $$tmp migrations || \
		{ echo "verify: migrations/ is stale: run make generate" >&2; rm -rf $$tmp; exit 1; }; rm -rf $$tmp
	$(SQLC) diff || { echo "verify: internal/db is stale: run make generate" >&2; exit 1; }

lint: lint-go lint-sql ## Run every linter

lint-go: ## gofmt and go vet
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:" $$out >&2; exit 1; fi
	$(GO) vet $(PKGS)

lint-sql: deps ## plpgsql_check over every PL/pgSQL function, all warnings on
	./scripts/lint-sql.sh

test: ## Run the test suite (race detector on) against a real Postgres
	$(GO) test -race -count=1 $(PKGS)

test-race: test ## Same as test: the suite always runs with -race

test-isolation: ## Interleaving specs of the SQL functions (Postgres' isolation tester)
	./scripts/test-isolation.sh
