// Package upgradetest checks pglease's schema lifecycle the way operators
// run it: a database at the released version (v0.1.0) with live leases,
// slots and a supervisor renewing every 100 ms is upgraded to head by the
// stock golang-migrate CLI, by `pglease migrate up`, and by ALTER EXTENSION
// pglease UPDATE; afterwards every tenure renews with its old fence, the
// next grant gets fence + 1, and the supervisor never lost its lease. It
// also checks that each released version still installs the catalog it
// shipped (sql/releases/VERSION.catalog), that an upgrade refuses a schema
// changed by hand without changing anything, and that down and up again
// work at every version. It holds tests only.
//
// # Safety
//
// The extension case writes the files of extension/ into the extension
// directory of the server that pgtest finds (as `make install-extension`
// does), so it must run as a user who can write there; it fails, saying
// so, when it cannot.
package upgradetest
