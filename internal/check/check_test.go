package check_test

import (
	"strings"
	"testing"

	"github.com/pglease/pglease/internal/check"
)

func TestText(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  string
	}{
		{"jobs", ""},
		{"ß日本🔒 ;'\"", ""},
		{strings.Repeat("x", 256), ""},
		{"", "1 to 256 bytes"},
		{strings.Repeat("x", 257), "1 to 256 bytes"},
		{"a\xffb", "valid UTF-8"},
		{"a\x00b", "NUL"},
	} {
		got := check.Text("name", tc.value)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Text(%q) = %q, want %q", tc.value, got, tc.want)
		}
	}
}
