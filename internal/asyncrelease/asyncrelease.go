// Package asyncrelease decides whether a release may commit without waiting
// for its WAL flush.
//
// A release need not be durable: if a crash loses it, the tenure stays held
// until its expiry, which is safe, and any later grant's durable commit
// flushes the WAL up to itself, the release included, before anyone is told
// of the grant (on a synchronous standby likewise). The asynchronous form
// sets synchronous_commit off for the statement's own transaction, so it is
// used only where that transaction is the release alone: on a pool, or on a
// connection outside a transaction block, never inside the caller's
// transaction, whose own writes must stay durable.
package asyncrelease

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// idle is the transaction status of a connection outside a transaction block.
const idle = 'I'

// OK reports whether a release run on database commits as a transaction of
// its own: a *pgxpool.Pool, or a *pgx.Conn or *pgxpool.Conn outside a
// transaction block. Anything else (a pgx.Tx, an unknown wrapper) is not.
func OK(database any) bool {
	switch d := database.(type) {
	case *pgxpool.Pool:
		return true
	case *pgx.Conn:
		return d.PgConn().TxStatus() == idle
	case *pgxpool.Conn:
		return d.Conn().PgConn().TxStatus() == idle
	}
	return false
}
