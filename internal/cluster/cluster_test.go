package cluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
)

// TestBeatAndNodes: a beat announces the node, its address, start and the
// time by its clock; the node list is read from the store at most every
// half second, or every half heartbeat if that is shorter.
func TestBeatAndNodes(t *testing.T) {
	st, clk := openStore(t), newClock()
	a, b := member(t, st, clk, "a"), member(t, st, clk, "b")
	if a.Self() != "a" || a.Config().Address != "a.test:7000" {
		t.Errorf("self %q, config %+v", a.Self(), a.Config())
	}
	beat(t, a, b)
	ns, err := a.Nodes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(ns); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("nodes %v, want a and b", got)
	}
	for _, n := range ns {
		if n.Address != n.ID+".test:7000" || !n.SeenAt.Equal(clk.now()) || n.StartedAt.IsZero() {
			t.Errorf("node %+v: want its address, seen at %s, a start", n, clk.now())
		}
	}

	c := member(t, st, clk, "c")
	beat(t, c)
	clk.add(heartbeat/2 - time.Microsecond)
	if ns, _ := a.Nodes(t.Context()); len(ns) != 2 {
		t.Errorf("within half a heartbeat of the last read: %v, want the 2 read then", ids(ns))
	}
	clk.add(time.Microsecond)
	if ns, _ := a.Nodes(t.Context()); len(ns) != 3 {
		t.Errorf("half a heartbeat after the last read: %v, want c too", ids(ns))
	}
	// With a slow heartbeat, a list serves for half a second at most.
	slow := New(Config{ID: "s", Heartbeat: 2 * time.Second, LostAfter: 20 * time.Second}, st, testLog(t))
	slow.now = clk.now
	if _, err := slow.Nodes(t.Context()); err != nil {
		t.Fatal(err)
	}
	beat(t, member(t, st, clk, "d"))
	clk.add(nodesFresh - time.Microsecond)
	if ns, _ := slow.Nodes(t.Context()); len(ns) != 3 {
		t.Errorf("within %s of the last read: %v, want the 3 read then", nodesFresh, ids(ns))
	}
	clk.add(time.Microsecond)
	if ns, _ := slow.Nodes(t.Context()); len(ns) != 4 {
		t.Errorf("%s after the last read: %v, want d too", nodesFresh, ids(ns))
	}

	// A failed read is an error, and is not cached.
	clk.add(nodesFresh)
	st.fail("Nodes", 1)
	if _, err := a.Nodes(t.Context()); !errors.Is(err, errDown) {
		t.Errorf("nodes with the store down: %v", err)
	}
	if ns, err := a.Nodes(t.Context()); err != nil || len(ns) != 4 {
		t.Errorf("nodes after the store is back: %v, %v", ids(ns), err)
	}
}

// TestLost: another node is lost once it has been silent for longer than
// LostAfter, but only by a node that has itself reached the store for that
// long: after a failed beat, nobody is lost for LostAfter.
func TestLost(t *testing.T) {
	st, clk := openStore(t), newClock()
	a, b := member(t, st, clk, "a"), member(t, st, clk, "b")
	lost := func() []string {
		t.Helper()
		ns, err := a.Lost(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return ids(ns)
	}
	beat(t, a, b)
	clk.add(lostAfter)
	if got := lost(); got != nil {
		t.Errorf("b silent for exactly LostAfter: lost %v", got)
	}
	clk.add(time.Microsecond)
	if got := lost(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("b silent past LostAfter: lost %v, want b (never a itself)", got)
	}
	beat(t, b)
	if got := lost(); got != nil {
		t.Errorf("b beat again: lost %v", got)
	}

	// a cannot reach the store for a moment: b's silence may be the
	// store's, so no one is lost until a has beaten for LostAfter again.
	clk.add(2 * lostAfter)
	st.fail("Beat", 1)
	if err := a.Beat(t.Context()); !errors.Is(err, errDown) || !strings.Contains(err.Error(), "node a") {
		t.Errorf("failed beat: %v", err)
	}
	if got := lost(); got != nil {
		t.Errorf("after a failed beat: lost %v", got)
	}
	beat(t, a)
	clk.add(lostAfter / 2)
	beat(t, a)
	clk.add(lostAfter/2 - time.Microsecond)
	if got := lost(); got != nil {
		t.Errorf("not yet steady: lost %v", got)
	}
	clk.add(time.Microsecond)
	if got := lost(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("steady again: lost %v, want b", got)
	}
	// A beat while steady keeps it steady.
	beat(t, a)
	if got := lost(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("after another beat: lost %v, want b", got)
	}

	// onTime: a beats every half LostAfter for LostAfter, the least that
	// makes it steady.
	onTime := func() {
		for range 2 {
			clk.add(lostAfter / 2)
			beat(t, a)
		}
	}
	// Both stall together (one host) for longer than LostAfter: when they
	// resume, each finds the other silent, but a was silent too, so no one
	// is lost until a has beaten on time for LostAfter again.
	beat(t, a, b)
	clk.add(3 * lostAfter)
	beat(t, a)
	if got := lost(); got != nil {
		t.Errorf("after a stall of both: lost %v", got)
	}
	onTime()
	if got := lost(); !slices.Equal(got, []string{"b"}) {
		t.Errorf("a beat on time for LostAfter after the stall: lost %v, want b", got)
	}
	// A late beat (a gap over half of LostAfter) restarts the count.
	clk.add(lostAfter/2 + time.Microsecond)
	beat(t, a)
	if got := lost(); got != nil {
		t.Errorf("after a late beat: lost %v", got)
	}
	onTime()

	st.fail("Nodes", 1)
	if _, err := a.Lost(t.Context()); !errors.Is(err, errDown) {
		t.Errorf("lost with the store down: %v", err)
	}
}

// syncBuffer is a log destination that Run's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRun: Run beats every Heartbeat until its context ends, through a
// store outage, which it reports once when it starts and once when it
// ends.
func TestRun(t *testing.T) {
	st := openStore(t)
	var logs syncBuffer
	c := New(Config{ID: "a", Address: "a.test:7000", Heartbeat: 10 * time.Millisecond, LostAfter: lostAfter}, st,
		slog.New(slog.NewTextHandler(&logs, nil)))
	st.fail("Beat", 3)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		c.Run(ctx)
		close(done)
	}()
	var first time.Time
	if !testenv.Eventually(t, patience, func() bool {
		ns, err := st.Nodes(t.Context())
		if err != nil || len(ns) != 1 {
			return false
		}
		if first.IsZero() {
			first = ns[0].SeenAt
		}
		return ns[0].SeenAt.After(first)
	}) {
		t.Fatal("no two beats")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatal("Run did not return when its context ended")
	}
	out := logs.String()
	if n := strings.Count(out, "node heartbeat failed; retrying"); n != 1 {
		t.Errorf("%d warnings for one outage of 3 beats:\n%s", n, out)
	}
	if n := strings.Count(out, "node heartbeat works again"); n != 1 {
		t.Errorf("%d notes of the recovery:\n%s", n, out)
	}
}

// TestOwnerOf: a session belongs to the node that claimed it first;
// others find its owner and its address while it beats, are told it is
// not answering after two missed beats, and that it is lost (with the
// session) after LostAfter or once it was forgotten.
func TestOwnerOf(t *testing.T) {
	st, clk := openStore(t), newClock()
	a, b := member(t, st, clk, "a"), member(t, st, clk, "b")
	beat(t, a, b)
	ctx := t.Context()

	if _, err := a.OwnerOf(ctx, "acme", "s1", false); !errors.Is(err, ErrNoOwner) {
		t.Fatalf("owner of an unknown session: %v", err)
	}
	o, err := a.OwnerOf(ctx, "acme", "s1", true)
	if err != nil || !o.Local || o.Node.ID != "a" || o.Node.Address != "a.test:7000" {
		t.Fatalf("claim: %+v, %v; want a, local", o, err)
	}
	for _, claim := range []bool{false, true} {
		o, err := b.OwnerOf(ctx, "acme", "s1", claim)
		if err != nil || o.Local || o.Node.ID != "a" || o.Node.Address != "a.test:7000" {
			t.Errorf("b asks (claim %v): %+v, %v; want a at its address", claim, o, err)
		}
	}
	if mine, err := a.Own(ctx, "acme", "s1"); err != nil || !mine {
		t.Errorf("a holds: %v, %v", mine, err)
	}
	if mine, err := b.Own(ctx, "acme", "s1"); err != nil || mine {
		t.Errorf("b holds: %v, %v", mine, err)
	}
	// Sessions are per tenant.
	if o, err := b.OwnerOf(ctx, "other", "s1", true); err != nil || !o.Local {
		t.Errorf("another tenant's s1: %+v, %v; want b's", o, err)
	}

	sessionErr := func(wantLost bool) *OwnerError {
		t.Helper()
		_, err := b.OwnerOf(ctx, "acme", "s1", false)
		var se *OwnerError
		if !errors.As(err, &se) || se.Lost != wantLost || se.Node != "a" || se.Tenant != "acme" || se.ID != "s1" {
			t.Fatalf("owner silent: %v; want a session error, lost %v", err, wantLost)
		}
		return se
	}
	clk.add(heartbeat * 5 / 2)
	if _, err := b.OwnerOf(ctx, "acme", "s1", false); err != nil {
		t.Errorf("owner silent for 2.5 beats: %v", err)
	}
	clk.add(time.Microsecond)
	se := sessionErr(false)
	if want := "s1 is owned by node a, which is not answering"; se.Error() != want {
		t.Errorf("error %q, want %q", se, want)
	}
	clk.add(lostAfter)
	se = sessionErr(true)
	if want := "s1 was lost with node a"; se.Error() != want {
		t.Errorf("error %q, want %q", se, want)
	}
	// Back before anyone forgot it: its session is its own again, once
	// b reads the node list again.
	clk.add(nodesFresh)
	beat(t, a)
	if o, err := b.OwnerOf(ctx, "acme", "s1", false); err != nil || o.Node.ID != "a" {
		t.Errorf("owner back: %+v, %v", o, err)
	}

	// Forgotten: lost, however recently it was seen.
	if err := st.ForgetNode(ctx, "a", clk.now().Add(time.Microsecond)); err != nil {
		t.Fatal(err)
	}
	clk.add(nodesFresh)
	se = sessionErr(true)
	// A client deleting the lost session frees its id: b may take it.
	if err := b.Forget(ctx, se); err != nil {
		t.Fatal(err)
	}
	if o, err := b.OwnerOf(ctx, "acme", "s1", true); err != nil || !o.Local {
		t.Errorf("after the lost session was forgotten: %+v, %v; want b's", o, err)
	}
	// Dropping a session another node holds does nothing; its holder's
	// drop frees it.
	beat(t, b)
	if err := a.Disown(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if o, err := a.OwnerOf(ctx, "acme", "s1", false); err != nil || o.Node.ID != "b" {
		t.Errorf("after a's drop of b's session: %+v, %v", o, err)
	}
	if err := b.Disown(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.OwnerOf(ctx, "acme", "s1", false); !errors.Is(err, ErrNoOwner) {
		t.Errorf("after b's drop: %v", err)
	}
}

// TestOwnerOfStoreDown: when the store fails, the caller gets the
// store's error, never an answer about the session.
func TestOwnerOfStoreDown(t *testing.T) {
	st, clk := openStore(t), newClock()
	a, b := member(t, st, clk, "a"), member(t, st, clk, "b")
	beat(t, a, b)
	if _, err := a.OwnerOf(t.Context(), "acme", "s1", true); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		claim  bool
	}{{"SessionOwner", false}, {"ClaimSession", true}, {"Nodes", false}} {
		st.fail(tc.method, 1)
		clk.add(nodesFresh) // no cached node list
		_, err := b.OwnerOf(t.Context(), "acme", "s1", tc.claim)
		var se *OwnerError
		if !errors.Is(err, errDown) || errors.Is(err, ErrNoOwner) || errors.As(err, &se) || !strings.Contains(err.Error(), "s1") {
			t.Errorf("%s failing: %v; want the store's error about s1", tc.method, err)
		}
		beat(t, a)
	}
	st.fail("ClaimSession", 1)
	if _, err := b.Own(t.Context(), "acme", "s2"); !errors.Is(err, errDown) {
		t.Errorf("hold with the store down: %v", err)
	}
	if _, err := b.OwnerOf(t.Context(), "acme", "s2", false); !errors.Is(err, ErrNoOwner) {
		t.Errorf("a failed hold claimed s2: %v", err)
	}
}

// TestOwnerOfBeating: an owner that beats every Heartbeat is always
// found, never "not answering", however the others' cached node list
// lines up with its beats. A list cached for longer than the silence it
// is judged by would make a node that beats on time look silent (with a
// heartbeat of 100 ms, two missed beats are 250 ms: less than the half
// second a list used to be kept).
func TestOwnerOfBeating(t *testing.T) {
	st, clk := openStore(t), newClock()
	a, b := member(t, st, clk, "a"), member(t, st, clk, "b")
	beat(t, a, b)
	if _, err := a.OwnerOf(t.Context(), "acme", "s1", true); err != nil {
		t.Fatal(err)
	}
	const step = 10 * time.Millisecond
	for i := 1; i <= 200; i++ {
		clk.add(step)
		if i%int(heartbeat/step) == 0 {
			beat(t, a)
		}
		if o, err := b.OwnerOf(t.Context(), "acme", "s1", false); err != nil || o.Node.ID != "a" {
			t.Fatalf("%s after a's first beat, a beating every %s: %+v, %v", time.Duration(i)*step, heartbeat, o, err)
		}
	}
}

// TestOwnerOfCachesOwn: a node that found it owns an id answers for it
// from memory for a heartbeat (a burst of calls reads the store once),
// then asks the store again; its own drop forgets it at once.
func TestOwnerOfCachesOwn(t *testing.T) {
	st, clk := openStore(t), newClock()
	a := member(t, st, clk, "a")
	beat(t, a)
	ctx := t.Context()
	if o, err := a.OwnerOf(ctx, "acme", "s1", true); err != nil || !o.Local {
		t.Fatalf("claim: %+v, %v", o, err)
	}
	st.fail("SessionOwner", 1)
	if o, err := a.OwnerOf(ctx, "acme", "s1", false); err != nil || !o.Local || o.Node.Address != "a.test:7000" {
		t.Errorf("within a heartbeat: %+v, %v; want local, from memory", o, err)
	}
	clk.add(heartbeat)
	if _, err := a.OwnerOf(ctx, "acme", "s1", false); !errors.Is(err, errDown) {
		t.Errorf("a heartbeat later: %v; want the store asked (and failing)", err)
	}
	if o, err := a.OwnerOf(ctx, "acme", "s1", false); err != nil || !o.Local {
		t.Fatalf("asked again: %+v, %v", o, err)
	}
	if err := a.Disown(ctx, "acme", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.OwnerOf(ctx, "acme", "s1", false); !errors.Is(err, ErrNoOwner) {
		t.Errorf("after its drop: %v; want no owner", err)
	}
}
