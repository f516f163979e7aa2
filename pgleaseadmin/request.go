package pgleaseadmin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/sqlerr"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// Errors of RequestRelease, matched with errors.Is.
var (
	// ErrNotHeld means the lease has no live tenure (free, expired, or
	// unknown name: SQLSTATE PGL04): there is nobody to ask. Nothing was
	// changed.
	ErrNotHeld = errors.New("pglease: lease is not held")

	// ErrNotCandidate means the preferred holder is not waiting for the
	// lease (SQLSTATE PGL05): it has not been refused it recently by an
	// acquire with a value (pglease.WithValue, which every supervisor
	// standby makes), or it is the holder itself. Nothing was changed.
	ErrNotCandidate = errors.New("pglease: preferred holder is not a candidate for the lease")
)

// DefaultReserve is how long after the tenure ends RequestRelease reserves
// the next grant for the preferred holder, when Reserve is zero.
const DefaultReserve = 10 * time.Second

// MaxReserve is the longest reservation RequestRelease accepts.
const MaxReserve = time.Hour

// ReleaseRequest says whom RequestRelease prefers as the next holder.
type ReleaseRequest struct {
	// To is the preferred next holder: once the tenure ends, the next grant
	// is its alone for Reserve; after that anyone may acquire. It must be
	// a candidate (see ErrNotCandidate). Empty: anyone, at once.
	To string
	// Reserve is how long the next grant is reserved for To, from the end
	// of the tenure. Defaults to DefaultReserve; at most MaxReserve. Only
	// with To.
	Reserve time.Duration
}

// RequestRelease asks the holder of lease name to hand over
// (`pglease release --request`): the holder learns it at its next renewal,
// or at once when it observes the lease (a supervisor does), stops its
// work, and releases; a supervisor then stands by. Unlike ForceRelease
// nothing is cut off: a holder that never releases keeps the lease.
// It needs role pglease_operator (pglease_client is not granted it:
// docs/security.md), else ErrPermissionDenied. It returns ErrNotHeld when
// nobody holds the lease, ErrNotCandidate for a preferred holder that is
// not waiting for it, an error matching ErrInvalidArgument for a bad name,
// To or Reserve; nothing is changed then.
//
// It returns the tenure asked to hand over, and requested true; requested
// is false when a release of this tenure had been requested already: the
// first request (and its preferred holder) stands.
func RequestRelease(ctx context.Context, database pglease.DB, name string, req ReleaseRequest) (asked Tenure, requested bool, err error) {
	if err := tenure.CheckText("name", name); err != nil {
		return Tenure{}, false, err
	}
	if req.To != "" {
		if err := tenure.CheckText("ReleaseRequest.To", req.To); err != nil {
			return Tenure{}, false, err
		}
	}
	if req.Reserve < 0 || req.Reserve > MaxReserve || (req.Reserve > 0 && req.To == "") {
		return Tenure{}, false, tenure.Invalidf("ReleaseRequest.Reserve must be from 0 to %s, and only with To, got %s", MaxReserve, req.Reserve)
	}
	r, err := db.New(database).LeaseRequestRelease(ctx, db.LeaseRequestReleaseParams{
		Name:      name,
		Preferred: pgtype.Text{String: req.To, Valid: req.To != ""},
		Reserve:   cmp.Or(req.Reserve, DefaultReserve),
	})
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && ctx.Err() == nil {
			switch pgErr.Code {
			case "PGL04":
				return Tenure{}, false, fmt.Errorf("%w: %w", ErrNotHeld, sqlerr.Trim(pgErr))
			case "PGL05":
				return Tenure{}, false, fmt.Errorf("%w: %w", ErrNotCandidate, sqlerr.Trim(pgErr))
			case insufficientPriv:
				return Tenure{}, false, &operatorOnlyError{err: pgErr}
			}
		}
		return Tenure{}, false, interpret(ctx, err)
	}
	return Tenure{Holder: r.Holder, Fence: r.Fence}, r.Requested, nil
}

// operatorOnlyError is a refusal of RequestRelease for want of role
// pglease_operator. It matches pglease.ErrPermissionDenied, whose own
// words (grant pglease_client) would send a client role's user to the
// grant it has already.
type operatorOnlyError struct {
	err *pgconn.PgError
}

func (e *operatorOnlyError) Error() string {
	return fmt.Sprintf("%spermission denied: requesting a release needs role pglease_operator: "+
		"GRANT pglease_operator TO the connecting role, or connect as the owner of schema pglease (%s, SQLSTATE %s)",
		sqlerr.Prefix, e.err.Message, e.err.Code)
}

// Unwrap returns the *pgconn.PgError.
func (e *operatorOnlyError) Unwrap() error { return e.err }

// Is reports whether target is pglease.ErrPermissionDenied.
func (e *operatorOnlyError) Is(target error) bool { return target == pglease.ErrPermissionDenied }
