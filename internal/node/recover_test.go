package node

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// wantRetryable fails t unless rec is a retryable internal error whose
// message says why.
func wantRetryable(t *testing.T, rec *sandbox.Result, why string) {
	t.Helper()
	if rec.Status != sandbox.StatusFailed || rec.Error == nil || rec.Error.Type != sandbox.ErrInternal ||
		!rec.Error.Retryable || !strings.Contains(rec.Error.Message, why) || rec.FinishedAt.IsZero() {
		t.Errorf("%s: %s %+v; want a retryable internal error saying %q", rec.ExecutionID, rec.Status, rec.Error, why)
	}
}

// TestRecoverAtStart: what the node was running when its previous process
// died fails as retryable when it starts again; what was queued still runs;
// another node's runs are not touched.
func TestRecoverAtStart(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	for _, id := range []string{"mine", "theirs", "queued"} {
		submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: id, Language: "python", Code: "print('ran')"})
	}
	// The previous process of a claimed the oldest, node z the next.
	for _, node := range []string{"a", "z"} {
		if _, err := w.store.ClaimExecution(t.Context(), node, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	a.start(t)
	wantRetryable(t, final(t, a, "acme", "mine"), "the node restarted while running it")
	if rec := final(t, a, "acme", "queued"); rec.Status != sandbox.StatusSuccess || rec.Stdout != "ran\n" {
		t.Errorf("queued: %s %q", rec.Status, rec.Stdout)
	}
	if ex := w.stored("acme", "theirs"); ex.Record.Status != sandbox.StatusRunning || ex.Node != "z" {
		t.Errorf("another node's run: %s on %q, want running on z", ex.Record.Status, ex.Node)
	}
	if got := counter(t, a.metrics.Orphans); got != 1 {
		t.Errorf("orphans %v, want 1", got)
	}
	if a.created() != 1 {
		t.Errorf("%d sandboxes made, want 1 (the queued one)", a.created())
	}
}

// TestReapLost: when a node stops beating, the others fail what it was
// running as retryable, naming it, and what was queued for its sessions
// as lost with them; then they forget it, and its sessions stay lost.
func TestReapLost(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a", func(s *setup) {
		// Two missed beats make an owner not worth waiting for: room
		// enough for a slow machine between the ghost's beat and the
		// submission below.
		s.cluster.Heartbeat, s.cluster.LostAfter = 200*time.Millisecond, time.Second
	})
	beatGhost := func() {
		t.Helper()
		now := time.Now()
		if err := w.store.Beat(t.Context(), store.Node{ID: "ghost", Address: "ghost.invalid:1", StartedAt: now, SeenAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	beatGhost()
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "running", Language: "python", Code: "print(1)"})
	if ex, err := w.store.ClaimExecution(t.Context(), "ghost", time.Now()); err != nil || ex.ID != "running" {
		t.Fatalf("ghost's claim: %v", err)
	}
	if _, err := w.store.ClaimSession(t.Context(), "acme", "s1", "ghost", time.Now()); err != nil {
		t.Fatal(err)
	}
	beatGhost()
	ex := submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "waiting", SessionID: "s1", Language: "python", Code: "print(2)"})
	if ex.Target != "ghost" {
		t.Fatalf("a session's execution targets %q, want its owner ghost", ex.Target)
	}
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "free", Language: "python", Code: "print(3)"})

	a.start(t)
	// Not before the ghost is lost: a runs the free one, and leaves the
	// ghost's alone meanwhile.
	if rec := final(t, a, "acme", "free"); rec.Status != sandbox.StatusSuccess {
		t.Errorf("free: %s (%s)", rec.Status, rec.Summary)
	}
	wantRetryable(t, final(t, a, "acme", "running"), "node ghost lost: no heartbeat for")
	rec := final(t, a, "acme", "waiting")
	if rec.Status != sandbox.StatusFailed || rec.Error == nil || rec.Error.Type != sandbox.ErrInternal || rec.Error.Retryable ||
		!strings.Contains(rec.Error.Message, "session s1 was lost with node ghost") {
		t.Errorf("waiting: %s %+v; want failed, lost with its session", rec.Status, rec.Error)
	}
	if w.stored("acme", "waiting").Node != "" {
		t.Error("the lost session's execution was claimed")
	}
	if got := counter(t, a.metrics.Orphans); got != 1 {
		t.Errorf("orphans %v, want 1", got)
	}
	eventually(t, "the ghost is forgotten", func() bool {
		ns, err := w.store.Nodes(t.Context())
		return err == nil && !slices.ContainsFunc(ns, func(n store.Node) bool { return n.ID == "ghost" })
	})
	_, err := a.Submit(t.Context(), "acme", sandbox.ExecuteRequest{ExecutionID: "later", SessionID: "s1", Language: "python", Code: "print(4)"})
	var se *cluster.OwnerError
	if !errors.As(err, &se) || !se.Lost || se.Node != "ghost" {
		t.Errorf("submit to the lost session: %v, want it lost with ghost", err)
	}
}

// TestCheck: the node compares what it runs with the store, so what it
// missed reaches it anyway: a cancel flag set without a signal cancels the
// run, and a run whose record someone else ended is abandoned without
// overwriting that record.
func TestCheck(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	a.start(t)
	g := newGate(t)

	submit(t, a, "acme", g.req("flag"))
	g.started(t, "flag")
	if err := w.store.RequestCancel(t.Context(), "acme", "flag"); err != nil {
		t.Fatal(err)
	}
	if rec := final(t, a, "acme", "flag"); rec.Status != sandbox.StatusCancelled {
		t.Errorf("flagged run: %s %+v, want cancelled", rec.Status, rec.Error)
	}

	submit(t, a, "acme", g.req("ended"))
	g.started(t, "ended")
	ex := w.stored("acme", "ended")
	ex.Record.Status = sandbox.StatusFailed
	ex.Record.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: ended by another node", Retryable: true}
	if _, err := w.store.FinishExecution(t.Context(), ex, nil, sandbox.StatusRunning); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the abandoned run ends", func() bool { return a.Running() == 0 })
	if got := w.stored("acme", "ended").Record; got.Status != sandbox.StatusFailed || got.Error == nil || got.Error.Message != ex.Record.Error.Message {
		t.Errorf("record after the run was abandoned: %s %+v; want the other node's", got.Status, got.Error)
	}
}
