package testenv

import (
	"testing"
	"time"
)

func TestEventually(t *testing.T) {
	calls := 0
	if !Eventually(t, 10*time.Second, func() bool { calls++; return calls == 3 }) {
		t.Errorf("a condition true at the third check was not seen")
	}
	if calls != 3 {
		t.Errorf("checked %d times, want 3 (it stops at the first true)", calls)
	}

	start := time.Now()
	calls = 0
	if Eventually(t, 200*time.Millisecond, func() bool { calls++; return false }) {
		t.Errorf("a condition that never holds was reported as holding")
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("gave up after %v, before the 200ms timeout", took)
	}
	if calls < 2 {
		t.Errorf("checked %d times in 200ms", calls)
	}

	// A condition that comes true only at the deadline is still seen.
	deadline := time.Now().Add(150 * time.Millisecond)
	if !Eventually(t, 150*time.Millisecond, func() bool { return !time.Now().Before(deadline) }) {
		t.Errorf("a condition true at the deadline was missed")
	}
}
