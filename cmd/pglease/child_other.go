//go:build !unix

package main

import (
	"context"
	"syscall"
)

// child is not supported off Unix.
type child struct{}

// runReaper is never asked for off Unix.
func runReaper([]string) (int, bool) { return 0, false }

// runChild fails: pglease run needs process groups and signals.
func (r *runner) runChild(context.Context, []string) error {
	return failf("pglease run needs a Unix system (process groups and signals)")
}

// handleSignals does nothing off Unix.
func (r *runner) handleSignals() (stop func()) { return func() {} }

// signalName returns sig's name.
func signalName(sig syscall.Signal) string { return sig.String() }
