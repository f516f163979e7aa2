// Package sqlerr words the errors pglease's SQL raises for the Go errors
// that wrap them. The SQL functions and migrations start their messages
// with "pglease: " (psql and other clients show them alone), and the Go
// errors that wrap them start with it too: said once is enough.
package sqlerr

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Prefix starts the messages pglease's SQL raises, and its Go errors.
const Prefix = "pglease: "

// Error is a *pgconn.PgError raised by pglease's SQL, worded without
// Prefix and without the severity, for an error that says pglease
// already: "cannot upgrade schema pglease ... (SQLSTATE 55000)". errors.As
// still finds the *pgconn.PgError.
type Error struct {
	PgErr *pgconn.PgError
}

// Error implements error.
func (e *Error) Error() string {
	return strings.TrimPrefix(e.PgErr.Message, Prefix) + " (SQLSTATE " + e.PgErr.Code + ")"
}

// Unwrap returns the *pgconn.PgError.
func (e *Error) Unwrap() error { return e.PgErr }

// Trim returns err as an *Error when it is itself (not wrapped) a
// *pgconn.PgError whose message starts with Prefix, and err unchanged
// otherwise: a wrapped one is worded by its wrapper.
func Trim(err error) error {
	if pgErr, ok := err.(*pgconn.PgError); ok && strings.HasPrefix(pgErr.Message, Prefix) {
		return &Error{PgErr: pgErr}
	}
	return err
}

// Unprefixed returns err worded without a leading Prefix, for a wrapper
// whose own words say pglease already ("pglease: lease lost: ...: renewal
// failed: <err>"); errors.Is and errors.As still reach err.
func Unprefixed(err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), Prefix) {
		return err
	}
	return unprefixed{err}
}

type unprefixed struct{ err error }

func (u unprefixed) Error() string { return strings.TrimPrefix(u.err.Error(), Prefix) }
func (u unprefixed) Unwrap() error { return u.err }
