package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds and reports whether it did within
// timeout. It is what a test waits with instead of a fixed sleep: it
// returns as soon as the condition is true, and on a loaded machine it
// waits up to timeout rather than failing a test whose sleep was too
// short. cond is checked at once, then at growing intervals (10 ms up to
// 250 ms) and a last time at the deadline, so a condition that comes true
// just in time is seen. It gives up early, returning cond's last answer,
// when t's context ends. The caller fails t with what it was waiting for.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := 10 * time.Millisecond
	for {
		if cond() {
			return true
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		timer := time.NewTimer(min(wait, left))
		select {
		case <-t.Context().Done():
			timer.Stop()
			return cond()
		case <-timer.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}
