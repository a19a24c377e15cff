package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// claimed stores an execution and claims it for node a, as a's dispatcher
// does, returning it as claimed.
func claimed(t *testing.T, w *world, a *tnode, id string) *store.Execution {
	t.Helper()
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: id, Language: "python", Code: "pass"})
	ex, err := w.store.ClaimExecution(t.Context(), "a", time.Now())
	if err != nil || ex.ID != id {
		t.Fatalf("claim %s: %v", id, err)
	}
	return ex
}

// TestRecord: the final record of a run is retried while the store is
// unavailable, until it is stored or StoreRetry has passed; a refusal or a
// record someone else ended is not retried.
func TestRecord(t *testing.T) {
	done := func(ex *store.Execution) sandbox.Result {
		rec := ex.Record
		rec.Status = sandbox.StatusSuccess
		rec.FinishedAt = time.Now().UTC()
		return rec
	}
	for _, tc := range []struct {
		name    string
		fail    func(n int) error
		retry   time.Duration
		ended   bool // another node ended it first
		stored  bool
		calls   int // 0: 1 or 2
		wantNow sandbox.Status
	}{
		{name: "store back after two failures", fail: func(n int) error {
			if n <= 2 {
				return unavailable()
			}
			return nil
		}, retry: patience, stored: true, calls: 3, wantNow: sandbox.StatusSuccess},
		{name: "refused", fail: func(int) error { return fmt.Errorf("finish: %w", store.ErrInvalid) }, retry: patience,
			calls: 1, wantNow: sandbox.StatusRunning},
		{name: "ended elsewhere", ended: true, retry: patience, calls: 2, wantNow: sandbox.StatusCancelled},
		{name: "out of time", fail: func(int) error { return unavailable() }, retry: time.Nanosecond, wantNow: sandbox.StatusRunning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			fs := &flakyStore{Store: w.store}
			a := w.newNode("a", func(s *setup) { s.deps.Store = fs; s.cfg.StoreRetry = tc.retry })
			ex := claimed(t, w, a, "r1")
			if tc.ended {
				// The node's own write is the second: a cancel ended it.
				other := *ex
				other.Record.Status = sandbox.StatusCancelled
				if err := a.finish(t.Context(), &other, other.Record, sandbox.StatusRunning); err != nil {
					t.Fatal(err)
				}
			}
			fs.finishFail = tc.fail
			if got := a.record(ex, done(ex)); got != tc.stored {
				t.Errorf("record reported %v, want %v", got, tc.stored)
			}
			calls, _ := fs.calls()
			if tc.calls != 0 && calls != tc.calls || tc.calls == 0 && (calls < 1 || calls > 2) {
				t.Errorf("%d writes, want %d", calls, tc.calls)
			}
			if got := w.stored("acme", "r1").Record.Status; got != tc.wantNow {
				t.Errorf("stored status %s, want %s", got, tc.wantNow)
			}
		})
	}
}

// TestHandBack: an execution handed back is queued again for any node,
// retried while the store is unavailable, and left alone once someone
// else ended it.
func TestHandBack(t *testing.T) {
	w := newWorld(t)
	fs := &flakyStore{Store: w.store}
	a := w.newNode("a", func(s *setup) { s.deps.Store = fs })
	ex := claimed(t, w, a, "h1")
	fs.updateFail = func(n int) error {
		if n == 1 {
			return unavailable()
		}
		return nil
	}
	a.handBack(ex)
	if _, updates := fs.calls(); updates != 2 {
		t.Errorf("%d writes, want 2", updates)
	}
	got := w.stored("acme", "h1")
	if got.Record.Status != sandbox.StatusQueued || got.Node != "" || got.Record.QueueMS != 0 {
		t.Errorf("handed back: %s on %q (queue_ms %d), want queued on none", got.Record.Status, got.Node, got.Record.QueueMS)
	}
	if again, err := w.store.ClaimExecution(t.Context(), "b", time.Now()); err != nil || again.ID != "h1" {
		t.Errorf("another node's claim after the hand-back: %v", err)
	}

	// Ended by another node (which declared a lost) first: a's late
	// hand-back must leave that record alone, and is not retried.
	ex = claimed(t, w, a, "h2")
	ended := *ex
	ended.Record.Status = sandbox.StatusFailed
	if _, err := w.store.FinishExecution(t.Context(), &ended, nil, sandbox.StatusRunning); err != nil {
		t.Fatal(err)
	}
	a.handBack(ex)
	if _, updates := fs.calls(); updates != 3 {
		t.Errorf("%d writes in all, want 3", updates)
	}
	if got := w.stored("acme", "h2"); got.Record.Status != sandbox.StatusFailed {
		t.Errorf("after a stale hand-back: %s, want failed", got.Record.Status)
	}
}

// TestClaimRetries: a dispatcher whose claims fail (the store is down)
// keeps trying, and runs the queue once the store is back.
func TestClaimRetries(t *testing.T) {
	w := newWorld(t)
	fs := &flakyStore{Store: w.store, claimFail: func(n int) error {
		if n <= 3 {
			return fmt.Errorf("claim execution: %w", store.ErrUnavailable)
		}
		return nil
	}}
	a := w.newNode("a", func(s *setup) { s.deps.Store = fs })
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "c1", Language: "python", Code: "print('ok')"})
	a.start(t)
	if rec := final(t, a, "acme", "c1"); rec.Status != sandbox.StatusSuccess {
		t.Fatalf("c1: %s (%s)", rec.Status, rec.Summary)
	}
	fs.mu.Lock()
	claims := fs.claims
	fs.mu.Unlock()
	if claims < 4 {
		t.Errorf("%d claims, want the 3 failed ones and one more", claims)
	}
}
