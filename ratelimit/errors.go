package ratelimit

import (
	"errors"

	"github.com/pglease/pglease/internal/tenure"
)

// Sentinel errors, matched with errors.Is. Invalid arguments, a missing
// schema and a refused role are reported with pglease.ErrInvalidArgument,
// pglease.ErrNotMigrated and pglease.ErrPermissionDenied, as by the
// pglease package (a key under a prefix bound to another role is refused
// with ErrPermissionDenied).
var (
	// ErrNoLimit means no limit is set for the key or any prefix of it
	// (SQLSTATE PGL20): set one with Limiter.Set.
	ErrNoLimit = errors.New("ratelimit: no limit is set for the key")

	// ErrCostExceedsBurst means a take asked for more tokens than the
	// key's burst (SQLSTATE PGL21): it could never be allowed.
	ErrCostExceedsBurst = errors.New("ratelimit: cost is more than the key's burst")

	errInvalid = tenure.ErrInvalidArgument
)
