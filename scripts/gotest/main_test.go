package main

import (
	"strings"
	"testing"
)

func TestSummary(t *testing.T) {
	events := `{"Action":"start","Package":"p/a"}
{"Action":"output","Package":"p/a","Output":"pgtest: using 127.0.0.1:5432, PostgreSQL 15.8\n"}
{"Action":"run","Package":"p/a","Test":"TestOK"}
{"Action":"output","Package":"p/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"p/a","Test":"TestOK"}
{"Action":"output","Package":"p/a","Test":"TestBad","Output":"    bad_test.go:9: got 1, want 2\n"}
{"Action":"fail","Package":"p/a","Test":"TestBad"}
{"Action":"output","Package":"p/a","Output":"FAIL\tp/a\t0.1s\n"}
{"Action":"fail","Package":"p/a"}
{"Action":"output","Package":"p/b","Output":"pgtest: using 127.0.0.1:5432, PostgreSQL 15.8\n"}
{"Action":"output","Package":"p/b","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"p/b","Output":"panic: test timed out after 1s\n"}
{"Action":"fail","Package":"p/b"}
{"Action":"output","Package":"p/c","Output":"ok  \tp/c\t0.2s\n"}
{"Action":"pass","Package":"p/c"}
{"Action":"output","Package":"p/d","Output":"?   \tp/d\t[no test files]\n"}
{"Action":"skip","Package":"p/d"}
go: warning: not an event
`
	var out strings.Builder
	passed, failed, skipped, err := summary(strings.NewReader(events), &out)
	if err != nil {
		t.Fatal(err)
	}
	if passed != 1 || failed != 2 || skipped != 0 {
		t.Errorf("got %d passed, %d failed, %d skipped; want 1, 2 (a test and a package), 0", passed, failed, skipped)
	}
	want := "make test: server: 127.0.0.1:5432, PostgreSQL 15.8\n" +
		"    bad_test.go:9: got 1, want 2\n" +
		"pgtest: using 127.0.0.1:5432, PostgreSQL 15.8\nFAIL\tp/a\t0.1s\n" +
		"=== RUN   TestHang\n" +
		"pgtest: using 127.0.0.1:5432, PostgreSQL 15.8\npanic: test timed out after 1s\n" +
		"ok  \tp/c\t0.2s\n" +
		"go: warning: not an event\n"
	if got := out.String(); got != want {
		t.Errorf("got output\n%s\nwant\n%s", got, want)
	}
}
