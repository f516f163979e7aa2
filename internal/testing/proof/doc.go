// Package proof holds the tests that try to break pglease's claims and turn
// them into figures: stress tests whose every operation is recorded and
// checked (package internal/testing/history), one of them with calls in
// transactions at every isolation level against a purger, fault injection
// (terminated backends, a blackholed or flapping network, an immediate
// server restart, a holder frozen with SIGSTOP), fuzz targets over every
// SQL function's arguments, and a check that passwords never leak into
// errors or logs.
//
// It has no code besides its tests, which build with the tag "proof" so
// that they run on their own (make proof, a CI step of its own) rather than
// beside every other package of `go test ./...`: they inject faults and
// measure margins, and a machine saturated by the other packages' tests
// would only make them slower, not more telling. docs/reliability.md lists
// each test, what it does, the figures it reports (t.Logf) and how to run
// the long versions:
//
//	go test -tags proof -race -count=1 ./internal/testing/proof/   # CI size
//	PGLEASE_STRESS_DURATION=5m go test -tags proof -race -count=1 -timeout 30m \
//	    -run TestStress -v ./internal/testing/proof/                # long stress
//	go test -tags proof -run '^$' -fuzz FuzzAcquire -fuzztime 30s ./internal/testing/proof/
//
// Every test asserts safety (no violation, whatever the faults) and keeps
// its liveness assertions generous: the machines that run it are small and
// shared.
package proof
