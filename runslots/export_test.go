package runslots

import (
	"testing"

	"github.com/pglease/pglease/internal/tenure"
)

// SetWaitingHook makes c call f each time a blocking claim has been refused
// and is about to wait, with the scope it waits on. Set it before the
// client is used.
func SetWaitingHook(c *Client, f func(scope string)) {
	c.c.OnWait = func(scope string, _ error) { f(scope) }
}

// TestMaxCapacityMatchesTheCore: MaxCapacity, declared here with its value
// for go doc's readers, is the capacity the core checks claims against.
func TestMaxCapacityMatchesTheCore(t *testing.T) {
	if MaxCapacity != tenure.MaxCapacity {
		t.Errorf("MaxCapacity = %d, want the core's %d", MaxCapacity, tenure.MaxCapacity)
	}
}
