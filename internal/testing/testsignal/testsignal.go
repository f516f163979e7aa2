// Package testsignal lets a test wait for the code under test to reach a
// state, through a hook the code calls, instead of polling or sleeping
// (River's test signals).
package testsignal

import (
	"testing"
	"time"
)

// Timeout is the generous liveness bound of Await.
const Timeout = 10 * time.Second

// Signal carries the values a hook reports, buffered; values sent while the
// buffer is full are dropped (nobody is reading: the test has what it
// needs).
type Signal[T any] chan T

// New returns a Signal with room for 64 values.
func New[T any]() Signal[T] { return make(Signal[T], 64) }

// Send reports v without blocking; use it as the hook.
func (s Signal[T]) Send(v T) {
	select {
	case s <- v:
	default:
	}
}

// Await returns the next value, failing the test when none comes within
// Timeout.
func (s Signal[T]) Await(t testing.TB, what string) T {
	t.Helper()
	select {
	case v := <-s:
		return v
	case <-time.After(Timeout):
		t.Fatalf("timed out after %s waiting for %s", Timeout, what)
		var zero T
		return zero
	}
}
