// Package pgerr maps the errors of pglease's SQL functions to the Go
// packages' sentinel errors, in one place for pglease and runslots.
package pgerr

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs the mapping knows.
const (
	notHeld          = "PGL01" // pglease.assert_held: fence not current
	nullValue        = "22004" // NULL argument
	invalidParam     = "22023" // argument out of range
	badEncoding      = "22021" // text not valid in the database encoding
	invalidSchema    = "3F000" // schema pglease missing
	undefinedFunc    = "42883" // a pglease function missing
	undefinedTable   = "42P01" // a pglease view missing
	insufficientPriv = "42501" // no pglease_client grant
)

// Sentinels are the errors a package wraps the mapped failures in.
type Sentinels struct {
	Prefix  string // "pglease" or "runslots"
	Invalid error  // bad argument; nothing changed
	Lost    error  // the tenure is over (PGL01)
}

// Interpret maps err from a generated query. It returns ctx.Err() unchanged
// when ctx has ended, so callers can compare against context.Canceled and
// context.DeadlineExceeded.
func (s Sentinels) Interpret(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case notHeld:
			return fmt.Errorf("%w: %w", s.Lost, pgErr)
		case nullValue, invalidParam, badEncoding:
			return fmt.Errorf("%w: %w", s.Invalid, pgErr)
		case invalidSchema, undefinedFunc, undefinedTable:
			return fmt.Errorf("%s: schema pglease or its functions are missing; apply the migrations (pglease.Migrate, or `pglease migrate up`): %w", s.Prefix, err)
		case insufficientPriv:
			return fmt.Errorf("%s: permission denied; grant role pglease_client to the connecting role: %w", s.Prefix, err)
		}
	}
	return fmt.Errorf("%s: %w", s.Prefix, err)
}
