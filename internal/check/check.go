// Package check validates the text arguments of the SQL functions before a
// round trip, as the SQL would, plus what Postgres text cannot hold.
package check

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxLen is the longest lease name, holder or slot scope, in bytes.
const MaxLen = 256

// Text says why value cannot be a lease name, holder or slot scope named
// arg, or returns "" when it can.
func Text(arg, value string) string {
	switch n := len(value); {
	case n < 1 || n > MaxLen:
		return fmt.Sprintf("%s must be 1 to %d bytes long, got %d bytes", arg, MaxLen, n)
	case !utf8.ValidString(value):
		return fmt.Sprintf("%s must be valid UTF-8", arg)
	case strings.IndexByte(value, 0) >= 0:
		return fmt.Sprintf("%s must not contain NUL bytes (Postgres text cannot hold them)", arg)
	}
	return ""
}
