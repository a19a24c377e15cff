//go:build linux

package agent

import (
	"errors"
	"testing"
)

// TestLocalResetEndsWatches: a reset ends every watch, so a pooled
// sandbox's next tenant inherits none: each ends with KindReset before the
// reset returns, and a full set of new watches fits again.
func TestLocalResetEndsWatches(t *testing.T) {
	l, _ := startLocal(t)
	ctx := t.Context()
	var stops []func() error
	var evs []*events
	for range maxWatches {
		ev, stop := startWatch(t, l, "/workspace", false)
		evs, stops = append(evs, ev), append(stops, stop)
	}
	if _, err := l.Watch(ctx, "/tmp", false, func(WatchEvent) {}); !errors.Is(err, KindLimit) {
		t.Fatalf("a watch past the cap: %v, want KindLimit", err)
	}
	if err := l.Reset(ctx, ResetRequest{Clear: []string{"/workspace"}}); err != nil {
		t.Fatal(err)
	}
	for i, stop := range stops {
		evs[i].waitFor(t, OpEnd, "/workspace")
		if err := stop(); !errors.Is(err, KindReset) {
			t.Errorf("watch %d after a reset: %v, want KindReset", i, err)
		}
	}
	// The next tenant's watches, as many as the agent takes.
	var fresh []*events
	for range maxWatches {
		ev, _ := startWatch(t, l, "/workspace", false)
		fresh = append(fresh, ev)
	}
	do(t, l, "touch new")
	for _, ev := range fresh {
		ev.waitFor(t, OpCreate, "/workspace/new")
	}
}
