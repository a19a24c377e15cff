package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// TestClusterRouting: a call about a sandbox or session reaches the node
// that owns it, whichever node it came to; the listing is every node's.
func TestClusterRouting(t *testing.T) {
	w := newWorld(t)
	a := w.stack(func(o *options) { o.id = "node-a" })
	b := w.stack(func(o *options) { o.id = "node-b" })
	a.createBox(keyAlpha, "box", map[string]string{"on": "a"})
	var info sandbox.Info
	b.call(keyAlpha, "GET", "/v1/sandboxes/box", "", http.StatusOK, &info)
	if info.SandboxID != "box" || info.Metadata["on"] != "a" {
		t.Errorf("box through node b: %+v", info)
	}
	var l sandbox.SandboxList
	b.call(keyAlpha, "GET", "/v1/sandboxes?metadata.on=a", "", http.StatusOK, &l)
	if len(l.Sandboxes) != 1 || l.Sandboxes[0].SandboxID != "box" {
		t.Errorf("node b lists %+v", l)
	}
	p := b.start(keyAlpha, "box", sandbox.StartProcessRequest{Shell: "echo forwarded"})
	if out, _ := outputOf(b.processEvents(keyAlpha, "box", p.PID)); out != "forwarded\n" {
		t.Errorf("a process through node b printed %q", out)
	}
	// A forwarded call is served where it lands: node b has no box.
	b.fail(keyAlpha, "GET", "/v1/sandboxes/box", "", http.StatusNotFound, "not_found", cluster.ForwardedHeader, "node-a")
	// An id another node holds is not created again here.
	b.fail(keyAlpha, "POST", "/v1/sandboxes", `{"sandbox_id": "box"}`, http.StatusConflict, "conflict")
	b.call(keyAlpha, "DELETE", "/v1/sandboxes/box", "", http.StatusNoContent, nil)
	a.fail(keyAlpha, "GET", "/v1/sandboxes/box", "", http.StatusNotFound, "not_found")

	// A session made through node b runs its executions there, submitted
	// on either node.
	b.call(keyAlpha, "PUT", "/v1/sessions/s1/files/in.txt", "on b\n", http.StatusNoContent, nil)
	req := bash("cat in.txt")
	req.SessionID = "s1"
	var res sandbox.Result
	a.call(keyAlpha, "POST", "/v1/executions?wait=true", jsonOf(t, req), http.StatusOK, &res)
	if res.Stdout != "on b\n" {
		t.Errorf("the session's execution through node a: %+v", res)
	}
	a.call(keyAlpha, "GET", "/v1/sessions/s1/files/in.txt", "", http.StatusOK, nil)
}

// TestOwnerGone: a sandbox or session whose node is lost is 410 (and
// deleting it frees its id); one whose node is late or cannot be reached
// is 503 with Retry-After.
func TestOwnerGone(t *testing.T) {
	w := newWorld(t)
	s := w.stack(func(o *options) { o.idle = true })
	ctx := t.Context()
	now := time.Now()
	own := func(nodeID, addr string, seen time.Time, ids ...string) {
		t.Helper()
		if err := w.store.Beat(ctx, store.Node{ID: nodeID, Address: addr, StartedAt: seen, SeenAt: seen}); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if owner, err := w.store.ClaimSession(ctx, "alpha", id, nodeID, seen); err != nil || owner != nodeID {
				t.Fatalf("claim %s for %s: %q, %v", id, nodeID, owner, err)
			}
		}
	}
	own("gone", "127.0.0.1:1", now.Add(-time.Hour), "lost-box", "lost-session")
	own("late", "127.0.0.1:1", now.Add(-10*time.Second), "late-box")
	own("cut-off", "127.0.0.1:1", now, "far-box")

	e, _ := s.fail(keyAlpha, "GET", "/v1/sandboxes/lost-box", "", http.StatusGone, "sandbox_lost")
	if e.Field != "sandbox_id" {
		t.Errorf("sandbox_lost names %q", e.Field)
	}
	e, _ = s.fail(keyAlpha, "GET", "/v1/sessions/lost-session", "", http.StatusGone, "session_lost")
	if e.Field != "session_id" {
		t.Errorf("session_lost names %q", e.Field)
	}
	req := bash("true")
	req.SessionID = "lost-session"
	s.fail(keyAlpha, "POST", "/v1/executions", jsonOf(t, req), http.StatusGone, "session_lost")
	for _, path := range []string{"/v1/sandboxes/late-box", "/v1/sandboxes/far-box", "/v1/sandboxes/far-box/processes"} {
		_, r := s.fail(keyAlpha, "GET", path, "", http.StatusServiceUnavailable, "sandbox_unavailable")
		if r.retryAfter() < 1 {
			t.Errorf("%s: no Retry-After", path)
		}
	}
	// Deleting what was lost forgets it: the id is free again.
	s.call(keyAlpha, "DELETE", "/v1/sandboxes/lost-box", "", http.StatusNoContent, nil)
	s.call(keyAlpha, "DELETE", "/v1/sessions/lost-session", "", http.StatusNoContent, nil)
	s.fail(keyAlpha, "GET", "/v1/sandboxes/lost-box", "", http.StatusNotFound, "not_found")
	s.createBox(keyAlpha, "lost-box", nil)
	// Another tenant's ids are not the lost node's.
	s.fail(keyBeta, "GET", "/v1/sandboxes/late-box", "", http.StatusNotFound, "not_found")
}
