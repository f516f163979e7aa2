package sqlerr

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestTrim(t *testing.T) {
	own := &pgconn.PgError{Severity: "ERROR", Code: "55000", Message: "pglease: cannot upgrade schema pglease"}
	other := &pgconn.PgError{Severity: "ERROR", Code: "42883", Message: "function pglease.acquire() does not exist"}
	wrapped := fmt.Errorf("context: %w", own)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{own, "cannot upgrade schema pglease (SQLSTATE 55000)"},
		{other, other.Error()},
		{wrapped, wrapped.Error()}, // its text is the wrapper's
		{errors.New("pglease: plain"), "pglease: plain"},
	} {
		got := Trim(tc.err)
		if got.Error() != tc.want {
			t.Errorf("Trim(%q) = %q, want %q", tc.err, got, tc.want)
		}
		if pgErr, ok := errors.AsType[*pgconn.PgError](tc.err); ok {
			if back, ok := errors.AsType[*pgconn.PgError](got); !ok || back != pgErr {
				t.Errorf("Trim(%q): errors.As finds %v, want the *pgconn.PgError", tc.err, back)
			}
		}
	}
}

func TestUnprefixed(t *testing.T) {
	cause := errors.New("pglease: connection lost")
	got := fmt.Errorf("pglease: lease lost: %w", Unprefixed(cause))
	if want := "pglease: lease lost: connection lost"; got.Error() != want {
		t.Errorf("wrapped: %q, want %q", got, want)
	}
	if !errors.Is(got, cause) {
		t.Errorf("errors.Is(%q, cause) = false, want true", got)
	}
	if plain := errors.New("dial tcp: refused"); Unprefixed(plain) != plain {
		t.Errorf("Unprefixed changed an error that does not start with %q", Prefix)
	}
	if Unprefixed(nil) != nil {
		t.Error("Unprefixed(nil) != nil")
	}
}
