package pgtest

import "testing"

// clientURL returns the URL clients of the test database connect with:
// url itself, unless the run goes through a connection pooler.
func clientURL(t testing.TB, url string) string {
	t.Helper()
	return url
}
