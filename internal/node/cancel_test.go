package node

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// TestCancelQueued: a queued execution that is cancelled is final at once
// and never runs, even once a node takes work.
func TestCancelQueued(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a", func(s *setup) { s.cfg.MaxConcurrency = 1 })
	g := newGate(t)
	submit(t, a, "acme", g.req("c1"))
	rec, err := a.Cancel(t.Context(), "acme", "c1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != sandbox.StatusCancelled || rec.Error == nil || rec.Error.Type != sandbox.ErrCancelled ||
		!strings.Contains(rec.Error.Message, "before it started") || rec.FinishedAt.IsZero() {
		t.Fatalf("cancelled record: %s %+v", rec.Status, rec.Error)
	}
	// The queue is oldest first: had c1 stayed claimable, it would run
	// before c2.
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "c2", Language: "python", Code: "print('c2')"})
	a.start(t)
	if rec := final(t, a, "acme", "c2"); rec.Status != sandbox.StatusSuccess {
		t.Fatalf("c2: %s (%s)", rec.Status, rec.Summary)
	}
	if g.runs("c1") != 0 || a.created() != 1 {
		t.Errorf("c1 ran %d times; %d sandboxes made, want 1", g.runs("c1"), a.created())
	}
	if got, _ := a.Get(t.Context(), "acme", "c1"); got.Status != sandbox.StatusCancelled {
		t.Errorf("c1 is now %s", got.Status)
	}
	// Cancelling what is final changes nothing.
	if rec, err := a.Cancel(t.Context(), "acme", "c2"); err != nil || rec.Status != sandbox.StatusSuccess {
		t.Errorf("cancel a finished execution: %v, %v", rec.Status, err)
	}
	if _, err := a.Cancel(t.Context(), "acme", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("cancel unknown: %v", err)
	}
}

// TestCancelRunning: a running execution is killed by a cancel, asked on
// the node that runs it or on another one (the signal crosses the state),
// and its record says cancelled.
func TestCancelRunning(t *testing.T) {
	for _, via := range []string{"a", "b"} {
		t.Run("via "+via, func(t *testing.T) {
			w := newWorld(t)
			a, b := w.newNode("a"), w.newNode("b")
			a.start(t)
			g := newGate(t)
			submit(t, a, "acme", g.req("r1"))
			g.started(t, "r1")
			b.start(t) // after a claimed r1: b has nothing to run
			canceller := map[string]*tnode{"a": a, "b": b}[via]
			if _, err := canceller.Cancel(t.Context(), "acme", "r1"); err != nil {
				t.Fatal(err)
			}
			rec := final(t, a, "acme", "r1")
			if rec.Status != sandbox.StatusCancelled || rec.Error == nil || rec.Error.Type != sandbox.ErrCancelled {
				t.Fatalf("record %s %+v, want cancelled", rec.Status, rec.Error)
			}
			if strings.Contains(rec.Stdout, "done") {
				t.Errorf("the program finished: %q", rec.Stdout)
			}
			if ex := w.stored("acme", "r1"); !ex.Cancel || ex.Node != "a" {
				t.Errorf("stored cancel %v on node %q, want set on a", ex.Cancel, ex.Node)
			}
			eventually(t, "the run ends", func() bool { return a.Running() == 0 })
		})
	}
}

// TestCancelFlagAtClaim: an execution claimed with its cancel flag already
// set (the cancel came between its claim and the queued update) is
// cancelled before its program starts.
func TestCancelFlagAtClaim(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	g := newGate(t)
	submit(t, a, "acme", g.req("f1"))
	if err := w.store.RequestCancel(t.Context(), "acme", "f1"); err != nil {
		t.Fatal(err)
	}
	a.start(t)
	rec := final(t, a, "acme", "f1")
	if rec.Status != sandbox.StatusCancelled {
		t.Fatalf("record %s %+v, want cancelled", rec.Status, rec.Error)
	}
	if w.stored("acme", "f1").Node != "a" || g.runs("f1") != 0 {
		t.Errorf("node %q, runs %d; want claimed by a and never run", w.stored("acme", "f1").Node, g.runs("f1"))
	}
}

// TestEarlyCancel: a cancel for a run not registered here yet is kept, and
// the run registering right after is cancelled at once; kept cancels
// expire.
func TestEarlyCancel(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	a.cancelLocal("acme/e1", errCancelled)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	a.register("acme/e1", &run{cancel: cancel, started: time.Now()})
	if !errors.Is(context.Cause(ctx), errCancelled) {
		t.Errorf("run registered after its cancel: cause %v, want cancelled", context.Cause(ctx))
	}
	other, cancelOther := context.WithCancelCause(context.Background())
	defer cancelOther(nil)
	a.register("acme/e2", &run{cancel: cancelOther, started: time.Now()})
	if other.Err() != nil {
		t.Errorf("a run without a cancel was cancelled: %v", context.Cause(other))
	}
	// A registered run is cancelled directly, with the cause given.
	a.cancelLocal("acme/e2", errLost)
	if !errors.Is(context.Cause(other), errLost) {
		t.Errorf("cancel of a registered run: cause %v", context.Cause(other))
	}

	a.mu.Lock()
	_, kept := a.early["acme/e1"]
	a.early["acme/old"] = time.Now().Add(-earlyTTL - time.Second)
	a.mu.Unlock()
	if kept {
		t.Error("a cancel consumed by its run is still kept")
	}
	a.cancelLocal("acme/e3", errCancelled)
	a.mu.Lock()
	_, old := a.early["acme/old"]
	_, e3 := a.early["acme/e3"]
	a.mu.Unlock()
	if old || !e3 {
		t.Errorf("kept cancels: old %v (want expired), e3 %v (want kept)", old, e3)
	}
}
