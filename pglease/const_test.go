package pglease

import (
	"testing"

	"github.com/pglease/pglease/internal/notify"
	"github.com/pglease/pglease/internal/tenure"
)

// TestConstantsMatchTheCore: the constants declared here with their values,
// for go doc's readers, are the ones the core enforces and uses.
func TestConstantsMatchTheCore(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"MaxNameLen", MaxNameLen, tenure.MaxNameLen},
		{"MaxTTL", MaxTTL, tenure.MaxTTL},
		{"DefaultNotifyLinger", DefaultNotifyLinger, notify.DefaultLinger},
		{"NotifyChannel", NotifyChannel, notify.Channel},
		{"DefaultTTL", DefaultTTL, tenure.DefaultTTL},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want the core's %v", c.name, c.got, c.want)
		}
	}
}
