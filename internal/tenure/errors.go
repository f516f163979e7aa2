package tenure

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/sqlerr"
)

// The sentinels of both kinds, exported again by pglease and runslots with
// their documentation.
var (
	// ErrInvalidArgument means an argument or setting was rejected.
	ErrInvalidArgument = errors.New("pglease: invalid argument")
	// ErrLeaseLost means a lease tenure is over.
	ErrLeaseLost = errors.New("pglease: lease lost: the tenure is over")
	// ErrSlotLost means a slot tenure is over; it also matches ErrLeaseLost.
	ErrSlotLost error = slotLost{}
	// ErrNotMigrated means schema pglease, or a function this client calls,
	// is missing.
	ErrNotMigrated = errors.New("pglease: schema pglease is missing or older than this client needs; apply the migrations (pgleasemigrate.Up, or `pglease migrate up`)")
	// ErrPermissionDenied means the connecting role may not call pglease's
	// functions.
	ErrPermissionDenied = errors.New("pglease: permission denied; grant role pglease_client to the connecting role")
)

// slotLost is ErrSlotLost's type: a distinct sentinel that also matches
// ErrLeaseLost.
type slotLost struct{}

func (slotLost) Error() string { return "runslots: slot lost: the tenure is over" }

// Is reports whether target is ErrLeaseLost.
func (slotLost) Is(target error) bool { return target == ErrLeaseLost }

// SQLSTATEs the mapping knows.
const (
	notHeld          = "PGL01" // pglease.assert_held: fence not current
	nullValue        = "22004" // NULL argument
	invalidParam     = "22023" // argument out of range
	badEncoding      = "22021" // text not valid in the database encoding
	invalidSchema    = "3F000" // schema pglease missing
	undefinedFunc    = "42883" // a pglease function missing
	undefinedTable   = "42P01" // a pglease view missing
	undefinedColumn  = "42703" // a column of a later schema missing
	insufficientPriv = "42501" // no pglease_client grant
)

// Interpret maps err from a generated query to the sentinels, with prefix
// ("pglease" or "runslots") and lost as the kind's words. It returns
// ctx.Err() unchanged when ctx has ended, so callers can compare against
// context.Canceled and context.DeadlineExceeded. The sentinels' messages
// start with "pglease: " already, and so do those the SQL raises: the
// mapped error says it once.
func Interpret(ctx context.Context, prefix string, lost, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case notHeld:
			return fmt.Errorf("%w: %w", lost, sqlerr.Trim(pgErr))
		case nullValue, invalidParam, badEncoding:
			return fmt.Errorf("%w: %w", ErrInvalidArgument, sqlerr.Trim(pgErr))
		case invalidSchema, undefinedFunc, undefinedTable:
			return fmt.Errorf("%w: %w", ErrNotMigrated, err)
		case insufficientPriv:
			return fmt.Errorf("%w: %w", ErrPermissionDenied, err)
		}
	}
	return fmt.Errorf("%s: %w", prefix, sqlerr.Trim(err))
}

// LostText returns the message of a kind's LostError: head, then the
// cause and what the workload returned, when set.
func LostText(head string, cause, workErr error) string {
	var b strings.Builder
	b.WriteString(head)
	if cause != nil {
		fmt.Fprintf(&b, ": %v", cause)
	}
	if workErr != nil {
		fmt.Fprintf(&b, "; the workload returned: %v", workErr)
	}
	return b.String()
}

// LostUnwrap returns what a kind's LostError wraps: the kind's lost
// sentinel, and the cause and the workload's error when set.
func LostUnwrap(lost, cause, workErr error) []error {
	errs := []error{lost}
	for _, err := range []error{cause, workErr} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Invalidf returns an error matching ErrInvalidArgument with a message.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// List converts the rows of a status query, or maps its error as
// Interpret does (prefix "pglease" or "runslots").
func List[R, S any](ctx context.Context, prefix string, rows []R, err error, conv func(R) S) ([]S, error) {
	if err != nil {
		return nil, Interpret(ctx, prefix, ErrLeaseLost, err)
	}
	out := make([]S, len(rows))
	for i, r := range rows {
		out[i] = conv(r)
	}
	return out, nil
}
