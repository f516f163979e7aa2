package pgleaseadmin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/sqlerr"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// ErrUnknownRole means BindPrefix was given a role that does not exist
// (SQLSTATE 42704); the error says which. Nothing was changed.
var ErrUnknownRole = errors.New("pglease: unknown role")

// SQLSTATEs the prefix calls map themselves, before interpret.
const (
	undefinedObject  = "42704" // prefix_bind: no such role
	insufficientPriv = "42501" // not the schema owner
)

// Prefix is one name prefix bound to a role (pglease.prefixes).
type Prefix struct {
	// Prefix is the bound name prefix: the lease names, slot scopes and
	// group names that start with it belong to Role.
	Prefix string
	// Role is the role the prefix is bound to: only its members take a
	// lease, claim a scope or create a group under it.
	Role string
	// BoundAt is when the prefix was bound to Role, by the server's clock.
	BoundAt time.Time
}

// BindPrefix binds the name prefix prefix to role on database
// (pglease.prefix_bind): from then on only members of role take a lease,
// claim a slot scope or create a group whose name starts with prefix,
// unless a longer bound prefix of the name says otherwise; others are
// refused with pglease.ErrPermissionDenied. Tenures live now run on until
// they end (end them with ForceRelease). Binding a bound prefix again moves
// it to role. It returns the role the prefix was bound to before, empty
// when none.
//
// It needs the schema owner: the role that owns schema pglease (no role is
// granted prefix_bind); anyone else gets an error matching
// pglease.ErrPermissionDenied that says so. It returns ErrUnknownRole for a
// role that does not exist, and an error matching
// pglease.ErrInvalidArgument for a prefix or role not 1 to 256 bytes;
// nothing is changed then.
func BindPrefix(ctx context.Context, database pglease.DB, prefix, role string) (previous string, err error) {
	if err := tenure.CheckText("prefix", prefix); err != nil {
		return "", err
	}
	if err := tenure.CheckText("role", role); err != nil {
		return "", err
	}
	previous, err = db.New(database).PrefixBind(ctx, db.PrefixBindParams{Prefix: prefix, Role: role})
	if err != nil {
		return "", interpretPrefix(ctx, "binding a prefix", err)
	}
	return previous, nil
}

// UnbindPrefix makes the names under prefix on database shared again, as
// far as no other bound prefix covers them (pglease.prefix_unbind). It
// returns the role the prefix was bound to, empty when it was not bound
// (nothing changes then). Like BindPrefix it needs the schema owner, and
// refuses a prefix not 1 to 256 bytes with an error matching
// pglease.ErrInvalidArgument.
func UnbindPrefix(ctx context.Context, database pglease.DB, prefix string) (previous string, err error) {
	if err := tenure.CheckText("prefix", prefix); err != nil {
		return "", err
	}
	previous, err = db.New(database).PrefixUnbind(ctx, prefix)
	if err != nil {
		return "", interpretPrefix(ctx, "unbinding a prefix", err)
	}
	return previous, nil
}

// Prefixes lists the bound prefixes of database, by prefix (`pglease
// prefix list`). Table pglease.prefixes is the schema owner's alone: any
// other role gets an error matching pglease.ErrPermissionDenied that says
// to run as the schema owner (a client asks OwnerOf about a name instead).
func Prefixes(ctx context.Context, database pglease.DB) ([]Prefix, error) {
	rows, err := db.New(database).PrefixList(ctx)
	if err != nil {
		return nil, interpretPrefix(ctx, "listing the bound prefixes", err)
	}
	out := make([]Prefix, len(rows))
	for i, r := range rows {
		out[i] = Prefix{Prefix: r.Prefix, Role: r.OwnerRole, BoundAt: r.BoundAt}
	}
	return out, nil
}

// OwnerOf returns the role that owns name (a lease name or a slot scope)
// on database (pglease.owner_of): the group's role for a shard lease of a
// group, else the role its longest bound prefix is bound to; empty for a
// shared name, which anyone may take. Read-only; roles pglease_client and
// pglease_operator may call it. It returns an error matching
// pglease.ErrInvalidArgument for a name not 1 to 256 bytes.
func OwnerOf(ctx context.Context, database pglease.DB, name string) (string, error) {
	if err := tenure.CheckText("name", name); err != nil {
		return "", err
	}
	owner, err := db.New(database).NameOwner(ctx, name)
	if err != nil {
		return "", interpret(ctx, err)
	}
	return owner, nil
}

// interpretPrefix maps the errors of the schema owner's prefix calls, what
// naming the call ("binding a prefix"): 42501 says to run as the schema
// owner, 42704 is ErrUnknownRole; the rest as interpret does.
func interpretPrefix(ctx context.Context, what string, err error) error {
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && ctx.Err() == nil {
		switch pgErr.Code {
		case insufficientPriv:
			return &ownerOnlyError{what: what, err: pgErr}
		case undefinedObject:
			return fmt.Errorf("%w: %w", ErrUnknownRole, &sqlerr.Error{PgErr: pgErr})
		}
	}
	return interpret(ctx, err)
}

// ownerOnlyError is a refusal of a call that is the schema owner's. It
// matches pglease.ErrPermissionDenied, whose own words (grant
// pglease_client) would not help here.
type ownerOnlyError struct {
	what string // the call, "binding a prefix"
	err  *pgconn.PgError
}

func (e *ownerOnlyError) Error() string {
	return fmt.Sprintf("%s%s is the schema owner's: run as the role that owns schema pglease (%s, SQLSTATE %s)",
		sqlerr.Prefix, e.what, e.err.Message, e.err.Code)
}

// Unwrap returns the *pgconn.PgError.
func (e *ownerOnlyError) Unwrap() error { return e.err }

// Is reports whether target is pglease.ErrPermissionDenied.
func (e *ownerOnlyError) Is(target error) bool { return target == pglease.ErrPermissionDenied }
