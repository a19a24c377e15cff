package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// claim claims for node at now and fails t on an error other than
// ErrNotFound; it returns nil when nothing is queued for node.
func claim(t *testing.T, s store.Store, node string, now time.Time) *store.Execution {
	t.Helper()
	e, err := s.ClaimExecution(t.Context(), node, now)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("ClaimExecution(%q): %v", node, err)
	}
	return e
}

func countQueued(t *testing.T, s store.Store) int {
	t.Helper()
	n, err := s.CountQueued(t.Context())
	if err != nil {
		t.Fatalf("CountQueued: %v", err)
	}
	return n
}

func testExecutionClaims(t *testing.T, s store.Store) {
	if e := claim(t, s, "node-a", base); e != nil {
		t.Fatalf("ClaimExecution on an empty store = %q, want ErrNotFound", e.ID)
	}
	if _, err := s.ClaimExecution(t.Context(), "", base); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("ClaimExecution without a node: %v, want ErrInvalid", err)
	}
	// Oldest first across tenants; one for node-b only; one already final.
	third := queued("globex", "third", base.Add(3*time.Second))
	first := queued("acme", "first", base.Add(time.Second))
	forB := queued("acme", "for-b", base)
	forB.Target = "node-b"
	second := queued("globex", "second", base.Add(2*time.Second))
	done := full("acme", "done")
	for _, e := range []*store.Execution{third, first, forB, second, done} {
		mustCreate(t, s, e)
	}
	if n := countQueued(t, s); n != 4 {
		t.Errorf("CountQueued = %d, want 4", n)
	}
	now := base.Add(10 * time.Second)
	var got []string
	for {
		e := claim(t, s, "node-a", now)
		if e == nil {
			break
		}
		got = append(got, e.Tenant+"/"+e.ID)
		want := stored(queued(e.Tenant, e.ID, e.Record.CreatedAt))
		want.Node = "node-a"
		want.Record.Status = sandbox.StatusRunning
		want.Record.QueueMS = now.Sub(e.Record.CreatedAt).Milliseconds()
		if diff := cmp.Diff(want, e); diff != "" {
			t.Errorf("claimed execution (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(want, mustGet(t, s, e.Tenant, e.ID)); diff != "" {
			t.Errorf("claimed execution as stored (-want +got):\n%s", diff)
		}
	}
	if want := []string{"acme/first", "globex/second", "globex/third"}; !slices.Equal(got, want) {
		t.Errorf("node-a claimed %v, want %v (oldest first, never another node's)", got, want)
	}
	if n := countQueued(t, s); n != 1 {
		t.Errorf("CountQueued after the claims = %d, want 1", n)
	}
	e := claim(t, s, "node-b", now)
	if e == nil || e.ID != "for-b" || e.Node != "node-b" || e.Target != "node-b" {
		t.Fatalf("node-b claimed %+v, want for-b", e)
	}
	if e := claim(t, s, "node-b", now); e != nil {
		t.Errorf("node-b claimed %q twice", e.ID)
	}
	// A claimed execution ends like any running one.
	e.Record.Status = sandbox.StatusSuccess
	if err := s.UpdateExecution(t.Context(), e, sandbox.StatusRunning); err != nil {
		t.Errorf("finish a claimed execution: %v", err)
	}
	if n := countQueued(t, s); n != 0 {
		t.Errorf("CountQueued at the end = %d, want 0", n)
	}
}

func testExecutionClaimsConcurrent(t *testing.T, s store.Store) {
	const n, claimers = 200, 8
	for i := range n {
		e := queued(fmt.Sprintf("t%d", i%3), fmt.Sprintf("e-%03d", i), base.Add(time.Duration(i%13)*time.Millisecond))
		if i%10 == 0 {
			e.Target = "node-0" // only node-0 may take these
		}
		mustCreate(t, s, e)
	}
	var mu sync.Mutex
	claimed := map[string][]string{} // by key: the nodes that claimed it
	var wg sync.WaitGroup
	for c := range claimers {
		node := fmt.Sprintf("node-%d", c)
		wg.Go(func() {
			for {
				e, err := s.ClaimExecution(t.Context(), node, base.Add(time.Minute))
				if errors.Is(err, store.ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("ClaimExecution(%s): %v", node, err)
					return
				}
				mu.Lock()
				claimed[e.Tenant+"/"+e.ID] = append(claimed[e.Tenant+"/"+e.ID], node)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(claimed) != n {
		t.Errorf("%d executions claimed, want %d", len(claimed), n)
	}
	for k, nodes := range claimed {
		if len(nodes) != 1 {
			t.Errorf("%s claimed by %v, want exactly one node", k, nodes)
		}
		var i int
		if _, err := fmt.Sscanf(k[3:], "e-%d", &i); err != nil {
			t.Fatalf("key %q: %v", k, err)
		}
		if i%10 == 0 && nodes[0] != "node-0" {
			t.Errorf("%s, targeted at node-0, claimed by %s", k, nodes[0])
		}
	}
	if q := countQueued(t, s); q != 0 {
		t.Errorf("CountQueued = %d after every claim, want 0", q)
	}
}

func testRequestCancel(t *testing.T, s store.Store) {
	e := queued("acme", "c", base)
	mustCreate(t, s, e)
	if got := mustGet(t, s, "acme", "c"); got.Cancel {
		t.Fatal("a new execution is already asked to cancel")
	}
	if err := s.RequestCancel(t.Context(), "acme", "c"); err != nil {
		t.Fatal(err)
	}
	if err := s.RequestCancel(t.Context(), "globex", "c"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RequestCancel of another tenant's execution: %v, want ErrNotFound", err)
	}
	if err := s.RequestCancel(t.Context(), "acme", "\xff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RequestCancel of an id that cannot exist: %v, want ErrNotFound", err)
	}
	c := claim(t, s, "node-a", base.Add(time.Second))
	if c == nil || !c.Cancel {
		t.Fatalf("claimed %+v, want c with Cancel set", c)
	}
	// Updates of the record keep the request.
	c.Record.Status = sandbox.StatusCancelled
	if err := s.UpdateExecution(t.Context(), c, sandbox.StatusRunning); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "acme", "c"); !got.Cancel || got.Record.Status != sandbox.StatusCancelled {
		t.Errorf("after the final update: cancel %v, status %s; want true, cancelled", got.Cancel, got.Record.Status)
	}
}

func testNodeExecutions(t *testing.T, s store.Store) {
	mine := queued("acme", "running-a", base)
	mustCreate(t, s, mine)
	if c := claim(t, s, "node-a", base); c == nil || c.ID != "running-a" {
		t.Fatalf("claimed %+v, want running-a", c)
	}
	waiting := queued("globex", "waiting-for-a", base.Add(time.Second))
	waiting.Target = "node-a"
	other := queued("acme", "for-b", base.Add(2*time.Second))
	other.Target = "node-b"
	free := queued("acme", "anyone", base.Add(3*time.Second))
	finished := full("acme", "finished") // ran on node-a, final
	for _, e := range []*store.Execution{waiting, other, free, finished} {
		mustCreate(t, s, e)
	}
	es, err := s.NodeExecutions(t.Context(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ids(es), []string{"running-a", "waiting-for-a"}; !slices.Equal(got, want) {
		t.Errorf("NodeExecutions(node-a) = %v, want %v", got, want)
	}
	es, err = s.NodeExecutions(t.Context(), "node-c")
	if err != nil || len(es) != 0 {
		t.Errorf("NodeExecutions(node-c) = %v, %v; want none", ids(es), err)
	}
}

func testNodes(t *testing.T, s store.Store) {
	if ns, err := s.Nodes(t.Context()); err != nil || len(ns) != 0 {
		t.Fatalf("Nodes on an empty store = %v, %v", ns, err)
	}
	a := store.Node{ID: "node-a", Address: "10.0.0.1:8080", StartedAt: base, SeenAt: base.Add(time.Second)}
	b := store.Node{ID: "node-b", Address: "[fd00::2]:8080", StartedAt: base, SeenAt: base.Add(2 * time.Second)}
	for _, n := range []store.Node{b, a} {
		if err := s.Beat(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	// A later beat moves SeenAt (and a restart the rest).
	a.Address, a.StartedAt, a.SeenAt = "10.0.0.9:8080", base.Add(time.Minute), base.Add(time.Minute+time.Second)
	if err := s.Beat(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	norm := func(n store.Node) store.Node {
		n.StartedAt, n.SeenAt = us(n.StartedAt), us(n.SeenAt)
		return n
	}
	got, err := s.Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Node{norm(a), norm(b)}, got); diff != "" {
		t.Errorf("Nodes (-want +got):\n%s", diff)
	}
	// Forgetting spares a node seen since.
	if err := s.ForgetNode(t.Context(), "node-a", base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetNode(t.Context(), "node-b", base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	got, err = s.Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Node{norm(a)}, got); diff != "" {
		t.Errorf("Nodes after ForgetNode (-want +got):\n%s", diff)
	}
	for _, bad := range []store.Node{{ID: ""}, {ID: "\xff"}, {ID: "x", Address: "a\x00b"}} {
		if err := s.Beat(t.Context(), bad); err == nil {
			t.Errorf("Beat(%q, %q) accepted", bad.ID, bad.Address)
		}
	}
}

func testSessions(t *testing.T, s store.Store) {
	ctx := t.Context()
	if _, err := s.SessionOwner(ctx, "acme", "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SessionOwner of no session: %v, want ErrNotFound", err)
	}
	owner, err := s.ClaimSession(ctx, "acme", "s1", "node-a", base)
	if err != nil || owner != "node-a" {
		t.Fatalf("ClaimSession = %q, %v; want node-a", owner, err)
	}
	if owner, err := s.ClaimSession(ctx, "acme", "s1", "node-b", base); err != nil || owner != "node-a" {
		t.Errorf("second ClaimSession = %q, %v; want node-a (the first owner stays)", owner, err)
	}
	if owner, err := s.ClaimSession(ctx, "globex", "s1", "node-b", base); err != nil || owner != "node-b" {
		t.Errorf("the same id in another tenant = %q, %v; want node-b", owner, err)
	}
	if _, err := s.ClaimSession(ctx, "acme", "s2", "node-a", base); err != nil {
		t.Fatal(err)
	}
	refs, err := s.NodeSessions(ctx, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.SessionRef{{Tenant: "acme", ID: "s1"}, {Tenant: "acme", ID: "s2"}}, refs); diff != "" {
		t.Errorf("NodeSessions(node-a) (-want +got):\n%s", diff)
	}
	// Only the owner releases.
	if err := s.ReleaseSession(ctx, "acme", "s1", "node-b"); err != nil {
		t.Fatal(err)
	}
	if owner, err := s.SessionOwner(ctx, "acme", "s1"); err != nil || owner != "node-a" {
		t.Errorf("after another node's release: %q, %v; want node-a", owner, err)
	}
	if err := s.ReleaseSession(ctx, "acme", "s1", "node-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SessionOwner(ctx, "acme", "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after the owner's release: %v, want ErrNotFound", err)
	}
	if owner, err := s.ClaimSession(ctx, "acme", "s1", "node-b", base); err != nil || owner != "node-b" {
		t.Errorf("claim after release = %q, %v; want node-b", owner, err)
	}
	// A move: only from its owner, its description kept; handed off, it
	// stays claimed until a node takes it, and one of two takes it.
	if err := s.SetSessionInfo(ctx, "acme", "s1", "node-b", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	if owner, err := s.MoveSession(ctx, "acme", "s1", "node-a", "node-c"); err != nil || owner != "node-b" {
		t.Errorf("a move from a node that does not own it = %q, %v; want node-b", owner, err)
	}
	if owner, err := s.MoveSession(ctx, "acme", "s1", "node-b", store.NoNode); err != nil || owner != store.NoNode {
		t.Errorf("hand off = %q, %v; want NoNode", owner, err)
	}
	if owner, err := s.ClaimSession(ctx, "acme", "s1", "node-c", base); err != nil || owner != store.NoNode {
		t.Errorf("a claim of a handed-off session = %q, %v; want NoNode", owner, err)
	}
	if owner, err := s.MoveSession(ctx, "acme", "s1", store.NoNode, "node-c"); err != nil || owner != "node-c" {
		t.Errorf("take over = %q, %v; want node-c", owner, err)
	}
	if owner, err := s.MoveSession(ctx, "acme", "s1", store.NoNode, "node-a"); err != nil || owner != "node-c" {
		t.Errorf("a second take over = %q, %v; want node-c", owner, err)
	}
	if list, err := s.ListSessions(ctx, "acme"); err != nil || len(list) != 1 || list[0].Node != "node-c" || string(list[0].Info) != `{"x":1}` {
		t.Errorf("after the moves: %+v, %v; want s1 of node-c with its description", list, err)
	}
	if _, err := s.MoveSession(ctx, "acme", "nosuch", "node-a", "node-b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("move of no session: %v, want ErrNotFound", err)
	}
	if err := s.ReleaseSession(ctx, "acme", "s1", "node-c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimSession(ctx, "acme", "s1", "node-b", base); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][3]string{{"", "s", "n"}, {"acme", "", "n"}, {"acme", "s", ""}, {"acme", "\xff", "n"}} {
		if _, err := s.ClaimSession(ctx, bad[0], bad[1], bad[2], base); err == nil {
			t.Errorf("ClaimSession(%q, %q, %q) accepted", bad[0], bad[1], bad[2])
		}
	}
	if _, err := s.SessionOwner(ctx, "acme", "\xff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SessionOwner of an id that cannot exist: %v, want ErrNotFound", err)
	}
}

// testSessionInfo: only a session's owner publishes its description;
// ListSessions returns a tenant's described sessions, by id, and nothing
// of other tenants or of sessions without one; a released session is no
// longer listed.
func testSessionInfo(t *testing.T, s store.Store) {
	ctx := t.Context()
	for _, c := range [][3]string{{"acme", "b", "node-a"}, {"acme", "a", "node-b"}, {"acme", "plain", "node-a"}, {"globex", "c", "node-a"}} {
		if _, err := s.ClaimSession(ctx, c[0], c[1], c[2], base); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SetSessionInfo(ctx, "acme", "b", "node-b", []byte(`{"x":1}`)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another node describes a session: %v, want ErrNotFound", err)
	}
	if err := s.SetSessionInfo(ctx, "acme", "missing", "node-a", []byte(`{}`)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("describe a missing session: %v, want ErrNotFound", err)
	}
	if err := s.SetSessionInfo(ctx, "acme", "b", "node-a", make([]byte, store.MaxSessionInfo+1)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("an oversized description: %v, want ErrInvalid", err)
	}
	for _, c := range [][4]string{{"acme", "b", "node-a", `{"v":1}`}, {"acme", "b", "node-a", `{"v":2}`},
		{"acme", "a", "node-b", `{"v":"a"}`}, {"globex", "c", "node-a", `{}`}} {
		if err := s.SetSessionInfo(ctx, c[0], c[1], c[2], []byte(c[3])); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ListSessions(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.SessionInfo{{Tenant: "acme", ID: "a", Node: "node-b", Info: []byte(`{"v":"a"}`)},
		{Tenant: "acme", ID: "b", Node: "node-a", Info: []byte(`{"v":2}`)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListSessions(acme) (-want +got):\n%s", diff)
	}
	if err := s.ReleaseSession(ctx, "acme", "b", "node-a"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ListSessions(ctx, "acme"); err != nil || len(got) != 1 || got[0].ID != "a" {
		t.Errorf("after a release: %+v, %v; want a alone", got, err)
	}
	if got, err := s.ListSessions(ctx, "nobody"); err != nil || len(got) != 0 {
		t.Errorf("a tenant without sessions: %+v, %v", got, err)
	}
}

func testSessionsConcurrent(t *testing.T, s store.Store) {
	const claimers = 8
	owners := make([]string, claimers)
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			var err error
			owners[i], err = s.ClaimSession(t.Context(), "acme", "contended", fmt.Sprintf("node-%d", i), base)
			if err != nil {
				t.Errorf("ClaimSession: %v", err)
			}
		})
	}
	wg.Wait()
	for _, o := range owners {
		if o != owners[0] || o == "" {
			t.Fatalf("concurrent claims saw owners %v, want one", owners)
		}
	}
}
