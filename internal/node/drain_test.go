package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/sandbox"
)

// holding makes node a lend sandboxes through a holdAcquirer that holds
// tenant "held"'s executions before their sandbox, where nothing of them
// has begun.
func holding(acq **holdAcquirer) func(*setup) {
	return func(s *setup) {
		*acq = newHoldAcquirer(fleet.FreshAcquirer{Fleet: s.fake.Fleet}, "held")
		s.deps.Pool = *acq
	}
}

// statuses lists the status events of an execution's log.
func statuses(t *testing.T, n *tnode, tenant, id string) []string {
	t.Helper()
	evs, err := n.Events(t.Context(), tenant, id, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.Type == state.EventStatus {
			out = append(out, string(e.Data))
		}
	}
	return out
}

// TestDrain: a draining node claims nothing more, hands what has not begun
// back to the queue at once (another node runs it), and returns once what
// runs has finished.
func TestDrain(t *testing.T) {
	w := newWorld(t)
	var acq *holdAcquirer
	a, b := w.newNode("a", holding(&acq)), w.newNode("b")
	a.start(t)
	g := newGate(t)
	submit(t, a, "acme", g.req("begun"))
	g.started(t, "begun")
	submit(t, a, "held", sandbox.ExecuteRequest{ExecutionID: "waiting", Language: "python", Code: "print('waited')"})
	acq.waitEntered(t)

	drained := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		defer cancel()
		a.Drain(ctx)
		close(drained)
	}()
	// The store first, then the event log: both, in time.
	eventually(t, "the run that had not begun is handed back", func() bool {
		ex := w.stored("held", "waiting")
		return ex.Record.Status == sandbox.StatusQueued && ex.Node == "" &&
			slices.Equal(statuses(t, a, "held", "waiting"), []string{"queued", "running", "queued"})
	})
	select {
	case <-drained:
		t.Fatal("drain returned while an execution runs")
	default:
	}
	// Queued on the draining node itself, which has a free slot and was
	// woken: it must leave it to others.
	submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "later", Language: "python", Code: "print('later')"})

	g.open(t, "begun")
	select {
	case <-drained:
	case <-time.After(patience):
		t.Fatal("drain did not return once the run finished")
	}
	if a.Running() != 0 {
		t.Errorf("%d running after the drain", a.Running())
	}
	if rec := final(t, a, "acme", "begun"); rec.Status != sandbox.StatusSuccess {
		t.Errorf("begun: %s (%s), want success: a drain lets runs finish", rec.Status, rec.Summary)
	}
	b.start(t)
	for _, x := range []struct{ tenant, id string }{{"held", "waiting"}, {"acme", "later"}} {
		rec := final(t, b, x.tenant, x.id)
		if node := w.stored(x.tenant, x.id).Node; rec.Status != sandbox.StatusSuccess || node != "b" {
			t.Errorf("%s: %s on %q, want success on b", x.id, rec.Status, node)
		}
	}
	if a.created() != 1 {
		t.Errorf("the drained node made %d sandboxes, want 1", a.created())
	}
	a.Drain(t.Context()) // a second drain is harmless and returns at once
}

// TestDrainTimeout: a drain gives up when its context ends, leaving the
// run; when the node then stops, the run is recorded as a retryable
// failure.
func TestDrainTimeout(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	a.start(t)
	g := newGate(t)
	submit(t, a, "acme", g.req("stuck"))
	g.started(t, "stuck")

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	a.Drain(ctx)
	cancel()
	if a.Running() != 1 || w.stored("acme", "stuck").Record.Status != sandbox.StatusRunning {
		t.Fatalf("after the drain ran out: %d running, status %s", a.Running(), w.stored("acme", "stuck").Record.Status)
	}
	a.stop()
	rec := w.stored("acme", "stuck").Record
	wantRetryable(t, &rec, "the node running it shut down")
	if g.runs("stuck") != 1 {
		t.Errorf("ran %d times", g.runs("stuck"))
	}
}

// TestStopHandsBack: a node stopping without a drain hands back what it
// claimed but had not begun, and records what had begun as a retryable
// failure.
func TestStopHandsBack(t *testing.T) {
	w := newWorld(t)
	var acq *holdAcquirer
	a := w.newNode("a", holding(&acq))
	a.start(t)
	g := newGate(t)
	submit(t, a, "acme", g.req("begun"))
	g.started(t, "begun")
	submit(t, a, "held", sandbox.ExecuteRequest{ExecutionID: "waiting", Language: "python", Code: "pass"})
	acq.waitEntered(t)
	a.stop()
	if ex := w.stored("held", "waiting"); ex.Record.Status != sandbox.StatusQueued || ex.Node != "" {
		t.Errorf("not begun: %s on %q, want queued again", ex.Record.Status, ex.Node)
	}
	rec := w.stored("acme", "begun").Record
	wantRetryable(t, &rec, "the node running it shut down")
}

// TestStarting: once the node is stopping, no first process starts; until
// then the run is marked begun when it starts one.
func TestStarting(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	r := &run{}
	s := &sink{n: a.Node, r: r}
	if !s.Starting() || !r.began {
		t.Fatalf("starting on a working node: began %v", r.began)
	}
	r2 := &run{}
	a.mu.Lock()
	a.stopping = true
	a.mu.Unlock()
	if (&sink{n: a.Node, r: r2}).Starting() || r2.began {
		t.Error("a stopping node let a first process start")
	}
}
