package node

import (
	"testing"

	"github.com/corralhq/corral/sandbox"
)

// TestSessionExecutions: a session's executions are queued for the node
// that holds the session, wherever they were submitted, and run there in
// the session's workspace, one after another.
func TestSessionExecutions(t *testing.T) {
	w := newWorld(t)
	withSessions := func(s *setup) { s.sessions = true }
	a, b := w.newNode("a", withSessions), w.newNode("b", withSessions)
	a.start(t)
	b.start(t)

	// Submitted on a first, the session becomes a's.
	ex := submit(t, a, "acme", sandbox.ExecuteRequest{ExecutionID: "s-1", SessionID: "s1", Language: "python",
		Code: "open('note', 'w').write('kept')"})
	if ex.Target != "a" {
		t.Fatalf("first execution targets %q, want a", ex.Target)
	}
	if rec := final(t, a, "acme", "s-1"); rec.Status != sandbox.StatusSuccess || rec.SessionID != "s1" {
		t.Fatalf("s-1: %s in session %q (%s)", rec.Status, rec.SessionID, rec.Summary)
	}
	// Submitted on b, it goes to a all the same: b, idle, leaves it.
	ex = submit(t, b, "acme", sandbox.ExecuteRequest{ExecutionID: "s-2", SessionID: "s1", Language: "python",
		Code: "print(open('note').read())"})
	if ex.Target != "a" {
		t.Fatalf("second execution targets %q, want a", ex.Target)
	}
	if rec := final(t, b, "acme", "s-2"); rec.Status != sandbox.StatusSuccess || rec.Stdout != "kept\n" {
		t.Fatalf("s-2: %s, stdout %q; want the first one's file (%s)", rec.Status, rec.Stdout, rec.Summary)
	}
	for _, id := range []string{"s-1", "s-2"} {
		if node := w.stored("acme", id).Node; node != "a" {
			t.Errorf("%s ran on %q, want a", id, node)
		}
	}
	if b.created() != 0 {
		t.Errorf("b made %d sandboxes, want none", b.created())
	}
	if info, err := a.sessions.Get("acme", "s1"); err != nil || info.Executions != 2 {
		t.Errorf("session on a: %+v, %v; want 2 executions", info, err)
	}
}
