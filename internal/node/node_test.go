package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// TestSubmitRuns: a submission is stored queued, claimed by the node, run
// in a sandbox and recorded: the record, the node that ran it, the event
// log from queued to done, and the queries over it.
func TestSubmitRuns(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a")
	a.start(t)

	req := sandbox.ExecuteRequest{ExecutionID: "ex-1", Language: "python", Code: "print(6*7)"}
	ex := submit(t, a, "acme", req)
	if ex.Record.Status != sandbox.StatusQueued || ex.Tenant != "acme" || ex.ID != "ex-1" {
		t.Errorf("submitted %s/%s %s, want acme/ex-1 queued", ex.Tenant, ex.ID, ex.Record.Status)
	}
	rec := final(t, a, "acme", "ex-1")
	if rec.Status != sandbox.StatusSuccess || rec.Stdout != "42\n" || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("record %s, stdout %q, exit %v; want success, 42 (%s)", rec.Status, rec.Stdout, rec.ExitCode, rec.Summary)
	}
	if rec.ExecutionID != "ex-1" || rec.Language != "python" || rec.CreatedAt.IsZero() || rec.FinishedAt.IsZero() || rec.Summary == "" {
		t.Errorf("record incomplete: %+v", rec)
	}
	if got := w.stored("acme", "ex-1").Node; got != "a" {
		t.Errorf("ran on %q, want a", got)
	}
	if got := a.created(); got != 1 {
		t.Errorf("%d sandboxes made, want 1", got)
	}

	evs, err := a.Events(t.Context(), "acme", "ex-1", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var stdout string
	for _, e := range evs {
		switch e.Type {
		case state.EventStatus:
			kinds = append(kinds, string(e.Data))
		case state.EventStdout:
			stdout += string(e.Data)
		default:
			kinds = append(kinds, e.Type)
		}
	}
	if want := []string{"queued", "running", state.EventDone}; !slices.Equal(kinds, want) || stdout != "42\n" {
		t.Errorf("events %v with stdout %q; want %v with 42", kinds, stdout, want)
	}

	// The same request under its id is the same execution; another
	// request under it is a conflict.
	again, err := a.Submit(t.Context(), "acme", req)
	if err != nil || again.Created || again.Execution.Record.Status != sandbox.StatusSuccess {
		t.Errorf("resubmit: %+v, %v; want the finished execution, not created", again, err)
	}
	other := req
	other.Code = "print(1)"
	if _, err := a.Submit(t.Context(), "acme", other); !errors.Is(err, ErrConflict) {
		t.Errorf("other request under the same id: %v, want ErrConflict", err)
	}
	// Ids are per tenant.
	if sub, err := a.Submit(t.Context(), "other", req); err != nil || !sub.Created {
		t.Errorf("same id for another tenant: %+v, %v; want created", sub, err)
	}
	final(t, a, "other", "ex-1")

	var ie *validate.InputError
	if _, err := a.Submit(t.Context(), "acme", sandbox.ExecuteRequest{Language: "cobol", Code: "x"}); !errors.As(err, &ie) {
		t.Errorf("unknown language: %v, want an input error", err)
	}

	if _, err := a.Get(t.Context(), "acme", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get unknown: %v", err)
	}
	if _, err := a.Get(t.Context(), "nobody", "ex-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("get another tenant's: %v", err)
	}
	if _, err := a.Wait(t.Context(), "acme", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("wait unknown: %v", err)
	}
	list, _, err := a.List(t.Context(), "acme", store.Query{})
	if err != nil || len(list) != 1 || list[0].ExecutionID != "ex-1" || list[0].Status != sandbox.StatusSuccess {
		t.Errorf("list: %+v, %v; want ex-1 success", list, err)
	}
}

// TestQueueBound: past the bound, submissions are refused; nothing runs
// meanwhile, so the queue only grows.
func TestQueueBound(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a", func(s *setup) { s.cfg.QueueBound = 2 })
	for i := range 2 {
		submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: fmt.Sprint("q", i), Language: "python", Code: "pass"})
	}
	_, err := a.Submit(t.Context(), "acme", sandbox.ExecuteRequest{ExecutionID: "q2", Language: "python", Code: "pass"})
	if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("third submission: %v, want ErrQueueFull", err)
	}
	if _, err := w.store.GetExecution(t.Context(), "acme", "q2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused execution was stored: %v", err)
	}
	// A resubmission of a queued one is no new work: not refused, nor
	// counted as refused; another request under its id is a conflict.
	if sub, err := a.Submit(t.Context(), "acme", sandbox.ExecuteRequest{ExecutionID: "q0", Language: "python", Code: "pass"}); err != nil || sub.Created {
		t.Errorf("resubmission at the bound: %+v, %v", sub, err)
	}
	if _, err := a.Submit(t.Context(), "acme", sandbox.ExecuteRequest{ExecutionID: "q0", Language: "python", Code: "print(1)"}); !errors.Is(err, ErrConflict) {
		t.Errorf("another request under a queued id at the bound: %v, want ErrConflict", err)
	}
	if got := counter(t, a.metrics.Rejected.WithLabelValues("queue_full")); got != 1 {
		t.Errorf("%v submissions counted as refused, want 1", got)
	}
}

// TestQueueOrder: one node running one execution at a time runs the queue
// oldest first, whatever the tenant.
func TestQueueOrder(t *testing.T) {
	w := newWorld(t)
	a := w.newNode("a", func(s *setup) { s.cfg.MaxConcurrency = 1 })
	order := filepath.Join(t.TempDir(), "order")
	var want []string
	for i := range 5 {
		id := fmt.Sprint("o", i)
		tenant := []string{"acme", "globex"}[i%2]
		code := fmt.Sprintf("with open(%s, 'a') as f: f.write(%q)", strconv.Quote(order), id+"\n")
		submit(t, a, tenant, sandbox.ExecuteRequest{ExecutionID: id, Language: "python", Code: code})
		want = append(want, id)
	}
	a.start(t)
	for i, id := range want {
		if rec := final(t, a, []string{"acme", "globex"}[i%2], id); rec.Status != sandbox.StatusSuccess {
			t.Fatalf("%s: %s (%s)", id, rec.Status, rec.Summary)
		}
	}
	b, err := os.ReadFile(order)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(b)); !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
}

// TestTwoNodesShareQueue: two nodes on one store take work from one queue;
// each execution runs exactly once, on one of them, and both take some.
func TestTwoNodesShareQueue(t *testing.T) {
	w := newWorld(t)
	one := func(s *setup) { s.cfg.MaxConcurrency = 1 }
	a, b := w.newNode("a", one), w.newNode("b", one)
	g := newGate(t)
	const n = 6
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("x", i)
		// Submitted on either node: the queue is the store's.
		submit(t, []*tnode{a, b}[i%2], "acme", g.req(ids[i]))
	}
	a.start(t)
	b.start(t)
	// Each node runs one at a time and the first two are held: each node
	// holds one, and the rest wait in the queue.
	eventually(t, "both nodes busy", func() bool { return a.Running() == 1 && b.Running() == 1 })
	g.started(t, ids[0])
	g.started(t, ids[1])
	if q, err := w.store.CountQueued(t.Context()); err != nil || q != n-2 {
		t.Fatalf("queued %d (%v), want %d", q, err, n-2)
	}
	for _, id := range ids {
		g.open(t, id)
	}
	ran := map[string]int{}
	for _, id := range ids {
		rec := final(t, a, "acme", id)
		if rec.Status != sandbox.StatusSuccess || rec.Stdout != "done "+id+"\n" {
			t.Errorf("%s: %s %q (%s)", id, rec.Status, rec.Stdout, rec.Summary)
		}
		if runs := g.runs(id); runs != 1 {
			t.Errorf("%s ran %d times", id, runs)
		}
		ran[w.stored("acme", id).Node]++
	}
	if ran["a"] == 0 || ran["b"] == 0 || ran["a"]+ran["b"] != n {
		t.Errorf("executions by node: %v; want both nodes, %d in all", ran, n)
	}
	if made := a.created() + b.created(); made != n {
		t.Errorf("%d sandboxes made for %d executions", made, n)
	}
}
