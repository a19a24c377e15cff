//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// events collects a watch's events.
type events struct {
	mu   sync.Mutex
	got  []WatchEvent
	more chan struct{}
}

func newEvents() *events { return &events{more: make(chan struct{}, 1)} }

func (e *events) add(ev WatchEvent) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
	select {
	case e.more <- struct{}{}:
	default:
	}
}

func (e *events) list() []WatchEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// waitFor waits for the event "op path" and returns the events before it.
func (e *events) waitFor(t *testing.T, op, path string) []WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		got := e.list()
		if i := slices.Index(got, WatchEvent{Path: path, Op: op}); i >= 0 {
			return got[:i]
		}
		select {
		case <-e.more:
		case <-ctx.Done():
			t.Fatalf("no %s %s in %v", op, path, got)
		}
	}
}

func startWatch(t *testing.T, l *Local, path string, recursive bool) (*events, func() error) {
	t.Helper()
	ev := newEvents()
	stop, err := l.Watch(t.Context(), path, recursive, ev.add)
	if err != nil {
		t.Fatalf("watch %s: %v", path, err)
	}
	t.Cleanup(func() { stop() })
	return ev, stop
}

// do runs a shell script in the sandbox and checks it succeeded.
func do(t *testing.T, l *Local, script string) {
	t.Helper()
	if out, st := run(t, l, sh(script)); st.Code != 0 {
		t.Fatalf("%s: %+v %s", script, st, out.stderr.String())
	}
}

// TestLocalWatch: what programs do in a watched directory comes as events,
// in order; a subdirectory's changes only to a recursive watch.
func TestLocalWatch(t *testing.T) {
	l, root := startLocal(t)
	if err := os.Mkdir(filepath.Join(root, "workspace", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	flat, stopFlat := startWatch(t, l, "/workspace", false)
	deep, _ := startWatch(t, l, "/workspace", true)

	do(t, l, "echo a > a; echo more >> a; chmod 600 a; mv a b; echo x > sub/x; rm b; touch marker")
	want := []WatchEvent{
		{"/workspace/a", OpCreate}, {"/workspace/a", OpWrite}, {"/workspace/a", OpChmod},
		{"/workspace/a", OpRename}, {"/workspace/b", OpCreate}, {"/workspace/b", OpRemove},
	}
	// Events come in order (writes in a row may be merged into one).
	if got := slices.Compact(flat.waitFor(t, OpCreate, "/workspace/marker")); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	got := deep.waitFor(t, OpCreate, "/workspace/marker")
	if !slices.Contains(got, WatchEvent{"/workspace/sub/x", OpCreate}) || !slices.Contains(got, WatchEvent{"/workspace/sub/x", OpWrite}) {
		t.Errorf("recursive watch: %v", got)
	}

	// A tree made at once is reported whole (what was made before its
	// directories were watched, by a scan) and watched whole; a directory
	// moved within the tree is still watched; one moved out is not.
	do(t, l, "mkdir -p n1/n2/n3 && touch n1/n2/n3/f && touch marker2")
	got = deep.waitFor(t, OpCreate, "/workspace/marker2")
	for _, p := range []string{"/workspace/n1", "/workspace/n1/n2", "/workspace/n1/n2/n3", "/workspace/n1/n2/n3/f"} {
		if !slices.Contains(got, WatchEvent{p, OpCreate}) {
			t.Errorf("no create %s in %v", p, got)
		}
	}
	// Each step waits for its marker: what is made in a directory moved in
	// before the agent watches it has no event (the scan finds what is
	// still there).
	do(t, l, "touch n1/n2/n3/g; mv n1 m1; touch marker3")
	got = deep.waitFor(t, OpCreate, "/workspace/marker3")
	do(t, l, "touch m1/n2/h; mv m1/n2 ../tmp/; touch ../tmp/n2/i; touch marker4")
	got = append(got, deep.waitFor(t, OpCreate, "/workspace/marker4")...)
	for _, e := range []WatchEvent{{"/workspace/n1/n2/n3/g", OpCreate}, {"/workspace/n1", OpRename},
		{"/workspace/m1", OpCreate}, {"/workspace/m1/n2/h", OpCreate}, {"/workspace/m1/n2", OpRename}} {
		if !slices.Contains(got, e) {
			t.Errorf("no %v in %v", e, got)
		}
	}
	for _, e := range got {
		if strings.HasSuffix(e.Path, "/i") {
			t.Errorf("a directory moved out of the tree is still watched: %v", e)
		}
	}

	// Stopped, a watch calls fn no more.
	if err := stopFlat(); err != nil {
		t.Errorf("stop: %v", err)
	}
	if err := stopFlat(); err != nil {
		t.Errorf("second stop: %v", err)
	}
	n := len(flat.list())
	do(t, l, "touch after")
	deep.waitFor(t, OpCreate, "/workspace/after")
	if got := flat.list(); len(got) != n {
		t.Errorf("events after stop: %v", got[n:])
	}
}

// TestLocalWatchEnds: a watch ends by itself when its directory goes, when
// its context is done, and when the sandbox is gone.
func TestLocalWatchEnds(t *testing.T) {
	l, root := startLocal(t)
	ctx := t.Context()
	if err := os.MkdirAll(filepath.Join(root, "tmp", "w", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	ev, stop := startWatch(t, l, "/tmp/w", true)
	do(t, l, "chmod 700 ../tmp/w; rm -r ../tmp/w")
	before := ev.waitFor(t, OpEnd, "/tmp/w")
	if !slices.Contains(before, WatchEvent{"/tmp/w", OpChmod}) || !slices.Contains(before, WatchEvent{"/tmp/w/sub", OpRemove}) {
		t.Errorf("before the end: %v", before)
	}
	if err := stop(); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("stop after the directory went: %v, want ENOENT", err)
	}

	// Its context done, a watch stops: the agent's watches are free again.
	wctx, cancel := context.WithCancel(ctx)
	ev2 := newEvents()
	stop2, err := l.Watch(wctx, "/workspace", false, ev2.add)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := stop2(); err != nil {
		t.Errorf("stop after the context: %v", err)
	}
	var stops []func() error
	for i := range maxWatches {
		s, err := l.Watch(ctx, "/workspace", false, func(WatchEvent) {})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		stops = append(stops, s)
	}
	if _, err := l.Watch(ctx, "/workspace", false, func(WatchEvent) {}); !errors.Is(err, KindLimit) {
		t.Errorf("watch %d: %v, want KindLimit", maxWatches+1, err)
	}
	for _, s := range stops {
		if err := s(); err != nil {
			t.Error(err)
		}
	}
	if len(ev2.list()) != 0 {
		t.Errorf("a cancelled watch's events: %v", ev2.list())
	}

	// The sandbox gone, a watch ends with the last call, and stop says so.
	ev3, stop3 := startWatch(t, l, "/workspace", false)
	l.Close()
	ev3.waitFor(t, OpEnd, "/workspace")
	if err := stop3(); !errors.Is(err, ErrLost) {
		t.Errorf("stop after the agent went: %v, want ErrLost", err)
	}
}

func TestLocalWatchRefused(t *testing.T) {
	l, root := startLocal(t)
	ws := filepath.Join(root, "workspace")
	tree(t, ws, "f", "d/", "up -> ../tmp", "dl -> d")
	for _, c := range []struct {
		path string
		kind error
	}{
		{"/workspace/f", syscall.ENOTDIR},
		{"/workspace/none", syscall.ENOENT},
		{"/workspace/up", KindSymlink},
		{"/workspace/dl/x", KindSymlink},
		{"/etc", KindInvalid},
		{"/workspace/../etc", KindInvalid},
	} {
		if _, err := l.Watch(t.Context(), c.path, true, func(WatchEvent) {}); !errors.Is(err, c.kind) {
			t.Errorf("watch %s: %v, want %v", c.path, err, c.kind)
		}
	}
	// A link in a watched tree is not followed: its target's changes do
	// not come.
	ev, _ := startWatch(t, l, "/workspace", true)
	do(t, l, "touch up/outside; touch d/inside")
	if got := ev.waitFor(t, OpCreate, "/workspace/d/inside"); len(got) != 0 {
		t.Errorf("events through a link: %v", got)
	}
}

// TestLocalWatchOverflow: events past the bounds are reported as an
// overflow, never dropped in silence: a consumer too slow for them, and a
// tree deeper than a watch follows.
func TestLocalWatchOverflow(t *testing.T) {
	l, root := startLocal(t)
	ev := newEvents()
	release := make(chan struct{})
	var once sync.Once
	stop, err := l.Watch(t.Context(), "/workspace", false, func(e WatchEvent) {
		once.Do(func() { <-release })
		ev.add(e)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// fn holds one batch (at most a backlog's worth) while the backlog
	// fills behind it.
	n := 2*maxWatchBacklog + 500
	// Writes to two files in turn: no two events in a row are equal.
	do(t, l, fmt.Sprintf("i=0; while [ $i -lt %d ]; do echo >> a; echo >> b; i=$((i+2)); done", n))
	// The first event holds fn while the rest pile up, until the host's
	// backlog or the agent's queue has overflowed.
	for deadline := time.Now().Add(20 * time.Second); !overflowed(l.Client); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no overflow while fn was held")
		}
	}
	close(release)
	before := ev.waitFor(t, OpOverflow, "/workspace")
	if len(before) >= n {
		t.Errorf("%d events before the overflow, of %d", len(before), n)
	}

	// Directories deeper than a watch follows: an overflow at once.
	deep := filepath.Join(root, "tmp", "deep")
	if err := os.MkdirAll(filepath.Join(deep, strings.Repeat("/d", maxWatchDepth+1)), 0o755); err != nil {
		t.Fatal(err)
	}
	ev2, _ := startWatch(t, l, "/tmp/deep", true)
	ev2.waitFor(t, OpOverflow, "/tmp/deep")
}

// overflowed reports whether a watch of c has dropped events or holds the
// agent's report that it did.
func overflowed(c *Client) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.watches {
		w.mu.Lock()
		over := w.overflow || slices.ContainsFunc(w.queue, func(e WatchEvent) bool { return e.Op == OpOverflow })
		w.mu.Unlock()
		if over {
			return true
		}
	}
	return false
}

// TestWatchQueue: the agent's queue for the host is bounded; a full one
// marks an overflow, and equal events in a row are one.
func TestWatchQueue(t *testing.T) {
	w := &watch{root: "/workspace", wake: make(chan struct{}, 1)}
	w.push("/workspace/a", OpWrite)
	w.push("/workspace/a", OpWrite)
	if len(w.pending) != 1 {
		t.Errorf("equal events in a row: %v", w.pending)
	}
	for i := range maxWatchQueue + 10 {
		w.push(fmt.Sprint("/workspace/", i), OpCreate)
	}
	if len(w.pending) != maxWatchQueue || !w.overflow {
		t.Errorf("%d pending, overflow %v", len(w.pending), w.overflow)
	}
}
