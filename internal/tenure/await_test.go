package tenure

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestRefusalWait pins when a refused call tries again: RetryIn after the
// refused request was sent (plus retryPad), not after its reply came back;
// RetryIn from the wait when the send time is unknown; at once when that
// time has passed.
func TestRefusalWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sent := time.Now()
		time.Sleep(30 * time.Millisecond) // the round trip of the refused call
		for _, c := range []struct {
			name string
			r    Refusal
			want time.Duration
		}{
			{"anchored at the send", Refusal{RetryIn: 100 * time.Millisecond, Sent: sent}, 70*time.Millisecond + retryPad},
			{"send time unknown", Refusal{RetryIn: 100 * time.Millisecond}, 100 * time.Millisecond},
			{"expired on the way back", Refusal{RetryIn: 10 * time.Millisecond, Sent: sent}, 0},
		} {
			if got := c.r.wait(); got != c.want {
				t.Errorf("%s: wait() = %s, want %s", c.name, got, c.want)
			}
		}
	})
}
