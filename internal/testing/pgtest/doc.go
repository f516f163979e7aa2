// Package pgtest gives each test a database of its own on a real PostgreSQL
// server. It is for tests only.
//
// # Overview
//
// A test package calls [Main] from its TestMain, and each test that needs a
// database calls [NewDatabase]:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		url := pgtest.NewDatabase(t) // dropped when the test ends
//		...
//	}
//
// The server is found once per test binary with [pgserver.Find]: the one
// named by PGLEASE_TEST_DATABASE_URL if that is set, else the one the PG*
// variables name if any is set, else a server on 127.0.0.1:5432 or the
// local Unix socket, else a throwaway cluster started from the local
// PostgreSQL binaries; after those, a container ([pgcontainer.Start]) if a
// Docker engine answers. Setting
// PGLEASE_TEST_PG_BINDIR to a directory holding initdb and pg_ctl forces a
// throwaway cluster from that directory, which runs the tests against that
// PostgreSQL version; it takes precedence over PGLEASE_TEST_DATABASE_URL.
// The server used is printed once to standard error.
//
// # Safety
//
// Each database has a random name, pglease_test_ followed by 16 hex digits,
// so test binaries running at the same time on one server do not meet. The
// role of PGLEASE_TEST_DATABASE_URL must be able to create databases; with
// [AdminURL], tests get that role's powers (superuser on every server pgtest
// finds or starts by itself).
//
// # Failure handling
//
// pgtest never skips a test: when no server can be found, every test that
// asks for a database fails with an error that lists what was tried and how
// to provide a server. [Main] stops a throwaway cluster or container whether
// the tests pass or fail. A test binary that dies without returning from
// m.Run (a panic, a -timeout) leaves its throwaway cluster behind; the next
// one stops and removes it.
package pgtest
