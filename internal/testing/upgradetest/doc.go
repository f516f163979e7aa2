// Package upgradetest checks pglease's schema lifecycle the way operators
// run it, for every released version in sql/versions (0.1.0 and 0.2.0
// today): a database at the release with live leases, slots and a
// supervisor renewing every 100 ms is upgraded to head by the stock
// golang-migrate CLI, by `pglease migrate up`, and by ALTER EXTENSION
// pglease UPDATE (through every version between); afterwards every tenure
// renews with its old fence, the next grant gets fence + 1, the supervisor
// never lost its lease, and the catalog equals a fresh install of head.
// Then it goes down to the release under traffic and up again. It also
// checks that each released version still installs the catalog it shipped
// (sql/releases/VERSION.catalog), that an upgrade from each release
// refuses a schema changed by hand without changing anything, that this
// build's clients work on each released schema, and that make verify
// (scripts/verify-schema.sh) fails when one byte of a released file
// changes. It holds tests only.
//
// # Safety
//
// The extension cases write the files of extension/ into the extension
// directory of the server that pgtest finds (as `make install-extension`
// does), so they must run as a user who can write there; they fail, saying
// so, when they cannot.
package upgradetest
