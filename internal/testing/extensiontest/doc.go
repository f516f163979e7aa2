// Package extensiontest checks that the PostgreSQL extension in extension/
// works: it installs its files into the test server's SHAREDIR (as `make
// install-extension` does), exercises CREATE EXTENSION pglease in a fresh
// database, and compares a fresh install of head with the released version
// updated by ALTER EXTENSION pglease UPDATE, and with the migrations. It
// holds tests only.
//
// # Safety
//
// The test writes pglease.control and the pglease--*.sql scripts into the
// extension directory of the server that pgtest finds, replacing any
// earlier copy with a rename, so it must run as a user who can write there
// (root, or the owner of the PostgreSQL installation). It fails, saying so,
// when it cannot, or when the server does not see the files (a container or
// a remote server, whose SHAREDIR is not on this machine).
package extensiontest
