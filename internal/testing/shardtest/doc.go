// Package shardtest runs pglease sharded by PL/Proxy on real, separate
// PostgreSQL clusters: a proxy database (migrations/proxy) over partition
// databases (the ordinary migrations) spread over two or more throwaway
// clusters started from the local server binaries, and tests the proxy
// against the SQL contract, the Go clients, role binding, routing and
// faults of one cluster (make test-sharded).
//
// # Overview
//
// [StartFleet] starts the clusters; [Fleet.NewSharded] creates a fresh
// proxy database and its partitions, partition i on cluster i mod the
// cluster count, the proxy on cluster 0; [Cluster.Halt] and
// [Cluster.Restart] stop and start one cluster in place.
//
// The package is for tests and benchmarks only: it starts servers. Its
// tests carry build tag sharded (scripts/test-sharded.sh passes it), so
// that go test ./... does not start their clusters.
package shardtest
