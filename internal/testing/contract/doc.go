// Package contract holds the tests of pglease's SQL contract, run through plain pgx as any client would.
package contract
