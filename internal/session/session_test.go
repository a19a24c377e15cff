package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes the unit tests use
// (testenv.FakeEngine); session_sandbox_test.go runs real ones as root.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

// registry is a cluster of one node on a SQLite store of t's own: where
// a manager records the sessions it holds.
func registry(t *testing.T) *cluster.Cluster {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return cluster.New(cluster.Config{ID: "node", Address: "127.0.0.1:1", Heartbeat: time.Second, LostAfter: time.Minute},
		st, slog.New(slog.DiscardHandler))
}

// TestExpiredIsNotRevived: a session past its TTL is gone even before the
// reaper runs. Touching it makes a new, empty session (still held by this
// node), never the old one with its files; Get agrees.
func TestExpiredIsNotRevived(t *testing.T) {
	reg := registry(t)
	dir := t.TempDir()
	table, err := workspace.Open(t.Context(), workspace.Config{Dir: dir, ReapInterval: time.Minute}, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m := New(DefaultConfig(), table, nil, nil, slog.New(slog.DiscardHandler))
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	table.Now = func() time.Time { return now }
	info, created, err := m.Touch(t.Context(), "t", "s", Options{TTL: time.Minute})
	if err != nil || !created {
		t.Fatalf("Touch = created %v, %v", created, err)
	}
	// What the session's workspace holds (its disk image, once used).
	old := filepath.Join(dir, "t", "s", "disk.img")
	if err := os.WriteFile(old, []byte("turn 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute + time.Second)
	if _, err := m.Get("t", "s"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get past the TTL: %v, want ErrNotFound", err)
	}
	again, created, err := m.Touch(t.Context(), "t", "s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !created || !again.CreatedAt.After(info.CreatedAt) || again.Executions != 0 {
		t.Errorf("Touch past the TTL: created %v, %+v; want a new session (the old one: %+v)", created, again, info)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the expired session's workspace is still there: %v", err)
	}
	if mine, err := reg.Own(t.Context(), "t", "s"); err != nil || !mine {
		t.Errorf("the new session is not this node's: %v, %v", mine, err)
	}
	if _, err := m.Get("t", "s"); err != nil {
		t.Errorf("Get of the new session: %v", err)
	}
}

func key(tenant, id string) string { return tenant + "/" + id }

// unit is a manager over fake sandboxes (no root) with a clock of its own.
type unit struct {
	t     *testing.T
	m     *Manager
	table *workspace.Table
	dir   string
	cfg   Config
	// reapEvery is the table's ReapInterval.
	reapEvery time.Duration
	f         *testenv.Fake
	reg       *testenv.Owners
	clock     *testenv.Clock
	logs      *testenv.LogBuffer
}

func newUnit(t *testing.T, mutate ...func(*Config)) *unit {
	t.Helper()
	// No language caches: warming one would make sandboxes of its own.
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	cfg := DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	u := &unit{t: t, f: f, reg: testenv.NewOwners(), clock: testenv.NewClock(), logs: &testenv.LogBuffer{}, dir: t.TempDir(), cfg: cfg,
		reapEvery: 30 * time.Second}
	u.m = u.open()
	return u
}

// open makes a table and a manager on the unit's directory, as a node's
// start does.
func (u *unit) open() *Manager {
	u.t.Helper()
	log := slog.New(slog.NewTextHandler(u.logs, nil))
	table, err := workspace.Open(u.t.Context(), workspace.Config{Dir: u.dir, ReapInterval: u.reapEvery}, u.reg, log)
	if err != nil {
		u.t.Fatal(err)
	}
	table.Now = u.clock.Now
	u.table = table
	m := New(u.cfg, table, u.f.Engine, u.f.Fleet, log)
	u.t.Cleanup(m.Close) // before the engine's and the fleet's
	return m
}

// acquire lends session (t, id)'s sandbox for a claim on tier.
func (u *unit) acquire(id string, tier runtime.Tier) *fleet.Lease {
	u.t.Helper()
	l, err := u.m.Acquirer("t", id).Acquire(u.t.Context(), u.f.PythonClaim(u.t, tier))
	if err != nil {
		u.t.Fatal(err)
	}
	return l
}

// sessionDir is where session (t, id) keeps its files.
func (u *unit) sessionDir(id string) string { return filepath.Join(u.dir, "t", id) }

// TestTouchCreatesAndSlides: Touch makes a session with the defaults,
// saved on disk; touching it again slides its TTL (or sets a new one) and
// keeps the rest. Only a new session asks the registry.
func TestTouchCreatesAndSlides(t *testing.T) {
	u := newUnit(t)
	start := u.clock.Now()
	info, created, err := u.m.Touch(t.Context(), "t", "s", Options{})
	if err != nil || !created {
		t.Fatalf("Touch = created %v, %v", created, err)
	}
	want := Info{Tenant: "t", Session: sandbox.Session{ID: "s", DiskMB: 1024, TTLSeconds: 3600, CreatedAt: start, LastUsedAt: start,
		ExpiresAt: start.Add(time.Hour)}}
	if info != want {
		t.Errorf("a new session: %+v, want %+v", info, want)
	}
	b, err := os.ReadFile(filepath.Join(u.sessionDir("s"), "session.json"))
	if err != nil {
		t.Fatal(err)
	}
	var saved Info
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Tenant = "t"; saved != want {
		t.Errorf("saved %+v, want %+v", saved, want)
	}

	u.clock.Advance(10 * time.Minute)
	later := u.clock.Now()
	info, created, err = u.m.Touch(t.Context(), "t", "s", Options{TTL: 2 * time.Hour, DiskMB: 1024})
	if err != nil || created {
		t.Fatalf("Touch again = created %v, %v", created, err)
	}
	want.TTLSeconds, want.LastUsedAt, want.ExpiresAt = 7200, later, later.Add(2*time.Hour)
	if info != want {
		t.Errorf("a touched session: %+v, want %+v", info, want)
	}
	if got, err := u.m.Get("t", "s"); err != nil || got != want {
		t.Errorf("Get = %+v, %v; want %+v", got, err, want)
	}
	if _, _, err := u.m.Touch(t.Context(), "t", "s", Options{DiskMB: 2048}); !errors.Is(err, ErrInvalid) {
		t.Errorf("another disk size for a session: %v, want ErrInvalid", err)
	}
	if holds, _ := u.reg.Asked(); !slices.Equal(holds, []string{"t/s"}) {
		t.Errorf("the registry was asked for %v, want t/s once", holds)
	}
}

// TestTouchRejectsBadOptions: a TTL or disk size out of bounds is refused
// before anything is made; the bounds themselves are accepted.
func TestTouchRejectsBadOptions(t *testing.T) {
	u := newUnit(t)
	cfg := u.cfg
	for _, o := range []Options{
		{TTL: -time.Second}, {TTL: cfg.MaxTTL + time.Second},
		{DiskMB: -1}, {DiskMB: 15}, {DiskMB: cfg.MaxDiskMB + 1},
	} {
		if _, _, err := u.m.Touch(t.Context(), "t", "bad", o); !errors.Is(err, ErrInvalid) {
			t.Errorf("Touch %+v: %v, want ErrInvalid", o, err)
		}
	}
	if _, err := u.m.Get("t", "bad"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a refused session exists: %v", err)
	}
	if holds, _ := u.reg.Asked(); len(holds) != 0 {
		t.Errorf("refused sessions asked the registry: %v", holds)
	}
	for i, o := range []Options{{TTL: cfg.MaxTTL}, {DiskMB: 16}, {DiskMB: cfg.MaxDiskMB}} {
		id := fmt.Sprintf("ok%d", i)
		if _, _, err := u.m.Touch(t.Context(), "t", id, o); err != nil {
			t.Errorf("Touch %+v: %v", o, err)
		}
	}
}

// TestTouchAsksTheRegistry: a session another node holds is not made
// here (ErrElsewhere), nor one the registry cannot say about.
func TestTouchAsksTheRegistry(t *testing.T) {
	u := newUnit(t)
	u.reg.Others[key("t", "theirs")] = true
	down := errors.New("store down")
	u.reg.Errs[key("t", "unknown")] = down
	if _, _, err := u.m.Touch(t.Context(), "t", "theirs", Options{}); !errors.Is(err, ErrElsewhere) {
		t.Errorf("a session of another node: %v, want ErrElsewhere", err)
	}
	if _, _, err := u.m.Touch(t.Context(), "t", "unknown", Options{}); !errors.Is(err, down) {
		t.Errorf("a session the registry cannot say about: %v, want its error", err)
	}
	for _, id := range []string{"theirs", "unknown"} {
		if _, err := u.m.Get("t", id); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: Get = %v, want ErrNotFound", id, err)
		}
		if _, err := os.Stat(u.sessionDir(id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: its directory was made: %v", id, err)
		}
	}
}

// TestReapRemovesExpired: the reaper removes the sessions past their TTL,
// files, kept sandbox and registry hold; it leaves the live ones and one
// in use, whose TTL slides when its execution ends.
func TestReapRemovesExpired(t *testing.T) {
	u := newUnit(t)
	for id, ttl := range map[string]time.Duration{"short": time.Minute, "long": time.Hour, "busy": time.Minute} {
		if _, _, err := u.m.Touch(t.Context(), "t", id, Options{TTL: ttl}); err != nil {
			t.Fatal(err)
		}
	}
	l := u.acquire("short", runtime.TierContainer)
	kept := l.Sandbox.ID()
	l.Release(true)
	busy := u.acquire("busy", runtime.TierContainer)
	u.clock.Advance(2 * time.Minute)
	u.table.Reap()
	if _, err := u.m.Get("t", "short"); !errors.Is(err, ErrNotFound) {
		t.Errorf("an expired session: Get = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(u.sessionDir("short")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an expired session's files are still there: %v", err)
	}
	if u.f.Alive(kept) {
		t.Errorf("an expired session's kept sandbox is not destroyed")
	}
	if _, drops := u.reg.Asked(); !slices.Equal(drops, []string{"t/short"}) {
		t.Errorf("holds dropped: %v, want t/short's", drops)
	}
	if _, err := u.m.Get("t", "long"); err != nil {
		t.Errorf("a live session was reaped: %v", err)
	}
	busy.Release(true)
	u.table.Reap()
	info, err := u.m.Get("t", "busy")
	if err != nil {
		t.Fatalf("the session in use was reaped: %v", err)
	}
	if want := u.clock.Now().Add(time.Minute); !info.ExpiresAt.Equal(want) || info.Executions != 1 {
		t.Errorf("after its execution: expires %v, executions %d; want %v, 1", info.ExpiresAt, info.Executions, want)
	}
}

// TestRunReaps: Run removes expired sessions every ReapInterval until its
// context ends.
func TestRunReaps(t *testing.T) {
	u := newUnit(t)
	u.reapEvery = 10 * time.Millisecond
	u.m.Close()
	u.m = u.open()
	if _, _, err := u.m.Touch(t.Context(), "t", "s", Options{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.table.Run(ctx)
	}()
	u.clock.Advance(2 * time.Minute)
	if !testenv.Eventually(t, 30*time.Second, func() bool {
		_, err := os.Stat(u.sessionDir("s"))
		return errors.Is(err, os.ErrNotExist)
	}) {
		t.Errorf("Run did not remove the expired session")
	}
	cancel()
	<-done
}

// TestDelete: Delete removes a session, its files and kept sandbox, and
// its registry hold; it waits for the session's execution to end.
func TestDelete(t *testing.T) {
	u := newUnit(t)
	l := u.acquire("s", runtime.TierContainer)
	sb := l.Sandbox.ID()

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if err := u.m.Delete(cancelled, "t", "s"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Delete of a session in use, cancelled: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- u.m.Delete(t.Context(), "t", "s") }()
	select {
	case err := <-done:
		t.Fatalf("Delete returned %v while an execution of the session ran", err)
	default:
	}
	l.Release(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := u.m.Get("t", "s"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of a deleted session: %v", err)
	}
	if _, err := os.Stat(u.sessionDir("s")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a deleted session's files are still there: %v", err)
	}
	if u.f.Alive(sb) {
		t.Errorf("a deleted session's kept sandbox is not destroyed")
	}
	if _, drops := u.reg.Asked(); !slices.Equal(drops, []string{"t/s"}) {
		t.Errorf("holds dropped: %v, want t/s's", drops)
	}
	if err := u.m.Delete(t.Context(), "t", "s"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a second Delete: %v, want ErrNotFound", err)
	}
	if _, err := u.m.List(t.Context(), "t", "s", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("List of a deleted session: %v, want ErrNotFound", err)
	}
}

// TestLoadAsksTheRegistry: a manager that starts on sessions left on disk
// keeps those the registry gives it and those it cannot ask about (the
// store is down), and removes those another node holds; files that are no
// session are skipped.
func TestLoadAsksTheRegistry(t *testing.T) {
	u := newUnit(t)
	for _, id := range []string{"mine", "theirs", "unknown"} {
		if _, _, err := u.m.Touch(t.Context(), "t", id, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(u.dir, "t", "empty"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(u.sessionDir("corrupt"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(u.sessionDir("corrupt"), "session.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	u.m.Close()

	u.reg = testenv.NewOwners()
	u.reg.Others[key("t", "theirs")] = true
	u.reg.Errs[key("t", "unknown")] = errors.New("store down")
	u.m = u.open()
	holds, _ := u.reg.Asked()
	slices.Sort(holds)
	if want := []string{"t/mine", "t/theirs", "t/unknown"}; !slices.Equal(holds, want) {
		t.Errorf("the registry was asked for %v, want %v", holds, want)
	}
	for id, want := range map[string]bool{"mine": true, "theirs": false, "unknown": true, "corrupt": false} {
		_, err := u.m.Get("t", id)
		if got := err == nil; got != want {
			t.Errorf("%s: loaded %v (%v), want %v", id, got, err, want)
		}
	}
	if _, err := os.Stat(u.sessionDir("theirs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy of another node's session is still there: %v", err)
	}
}

// TestWorkspaceOutlivesSandboxes: a session's executions share its
// workspace, in the sandbox kept between them; /tmp is emptied for each;
// an execution that does not end clean loses the sandbox, not the files.
func TestWorkspaceOutlivesSandboxes(t *testing.T) {
	u := newUnit(t)
	const which = "\nprint(os.listdir(os.environ['TMPDIR']))\n"
	out, first := u.f.RunPython(u.t, u.m.Acquirer("t", "s"), "t", "s", "import os\nopen('state.txt', 'w').write('turn 1')\nopen(os.path.join(os.environ['TMPDIR'], 'leak'), 'w').write('x')"+which)
	if !strings.Contains(out, "'leak'") {
		t.Fatalf("the first execution did not write /tmp: %q", out)
	}
	u.clock.Advance(time.Minute)
	out, second := u.f.RunPython(u.t, u.m.Acquirer("t", "s"), "t", "s", "import os\nprint(open('state.txt').read())"+which)
	if second != first {
		t.Errorf("the second execution ran in %s, not the kept %s", second, first)
	}
	if !strings.HasPrefix(out, "turn 1\n") || strings.Contains(out, "'leak'") {
		t.Errorf("the second execution saw %q; want the workspace's file and an empty /tmp", out)
	}
	info, err := u.m.Get("t", "s")
	if err != nil {
		t.Fatal(err)
	}
	if now := u.clock.Now(); info.Executions != 2 || !info.LastUsedAt.Equal(now) || !info.ExpiresAt.Equal(now.Add(time.Hour)) {
		t.Errorf("after two executions: %+v", info)
	}

	l := u.acquire("s", runtime.TierContainer)
	l.Release(false) // killed, timed out
	if u.f.Alive(first) {
		t.Errorf("a sandbox released unclean is kept")
	}
	out, third := u.f.RunPython(u.t, u.m.Acquirer("t", "s"), "t", "s", "print(open('state.txt').read())")
	if third == first || out != "turn 1\n" {
		t.Errorf("after an unclean release: ran in %s (the old one %s), saw %q", third, first, out)
	}
}

// TestOneExecutionAtATime: a session lends its sandbox to one execution
// at a time; the next one waits for it and gets the same sandbox.
func TestOneExecutionAtATime(t *testing.T) {
	u := newUnit(t)
	l := u.acquire("s", runtime.TierContainer)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := u.m.Acquirer("t", "s").Acquire(cancelled, u.f.PythonClaim(u.t, runtime.TierContainer)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second claim while the first runs: %v, want it waiting until cancelled", err)
	}
	got := make(chan *fleet.Lease, 1)
	go func() {
		l, err := u.m.Acquirer("t", "s").Acquire(t.Context(), u.f.PythonClaim(u.t, runtime.TierContainer))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("a second claim was served while the first ran")
	default:
	}
	l.Release(true)
	again := <-got
	if again == nil {
		return
	}
	if again.Sandbox.ID() != l.Sandbox.ID() || again.Fate != fleet.Kept {
		t.Errorf("the second claim got %s (fate %v), not the kept %s", again.Sandbox.ID(), again.Fate, l.Sandbox.ID())
	}
	again.Release(true)
}

// TestKeptSandboxReplaced: a kept sandbox that cannot serve the next
// claim (dead, for another tier, refusing its limits) is destroyed and the
// claim gets a new one on the same workspace. Only a broken one is
// logged as such: a limit below what it holds is the request's to have.
func TestKeptSandboxReplaced(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tier   runtime.Tier
		update error // what the kept sandbox's Update answers
		kill   bool  // the kept sandbox's agent dies
		warned bool
	}{
		{name: "dead", kill: true},
		{name: "other tier", tier: runtime.TierGVisor},
		{name: "below usage", update: &runtime.LimitBelowUsageError{Resource: "memory", Limit: 1, Usage: 2}},
		{name: "update fails", update: errors.New("cgroup gone"), warned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnit(t)
			l := u.acquire("s", runtime.TierContainer)
			kept := l.Sandbox
			ws := kept.(*fake.Sandbox).WorkspaceDir()
			if err := os.WriteFile(filepath.Join(ws, "state.txt"), []byte("turn 1"), 0o644); err != nil {
				t.Fatal(err)
			}
			l.Release(true)
			if tc.kill {
				if err := kept.Kill(t.Context()); err != nil {
					t.Fatal(err)
				}
				<-kept.Agent().Done()
			}
			if tc.update != nil {
				u.f.Runtimes[runtime.TierContainer].SetHook(func(c fake.Call) error {
					if c.Op == "update" && c.Sandbox.ID() == kept.ID() {
						return tc.update
					}
					return nil
				})
			}
			tier := runtime.TierContainer
			if tc.tier != "" {
				tier = tc.tier
			}
			l = u.acquire("s", tier)
			defer l.Release(true)
			if l.Sandbox.ID() == kept.ID() {
				t.Fatalf("the claim got the kept sandbox")
			}
			if u.f.Alive(kept.ID()) {
				t.Errorf("the replaced sandbox is not destroyed")
			}
			b, err := os.ReadFile(filepath.Join(l.Sandbox.(*fake.Sandbox).WorkspaceDir(), "state.txt"))
			if err != nil || string(b) != "turn 1" {
				t.Errorf("the new sandbox's workspace holds %q (%v), want the session's file", b, err)
			}
			if got := strings.Contains(u.logs.String(), "update kept session sandbox"); got != tc.warned {
				t.Errorf("logged as broken: %v, want %v\n%s", got, tc.warned, u.logs.String())
			}
		})
	}
}

// TestMaxIdleEvicts: beyond MaxIdle kept sandboxes, the least recently
// used session's is destroyed; the session lives on.
func TestMaxIdleEvicts(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.MaxIdle = 1 })
	l := u.acquire("one", runtime.TierContainer)
	one := l.Sandbox.ID()
	l.Release(true)
	l = u.acquire("two", runtime.TierContainer)
	two := l.Sandbox.ID()
	l.Release(true)
	if u.f.Alive(one) || !u.f.Alive(two) || u.f.AliveCount() != 1 {
		t.Errorf("kept: one %v, two %v, %d live; want only two's", u.f.Alive(one), u.f.Alive(two), u.f.AliveCount())
	}
	l = u.acquire("one", runtime.TierContainer)
	defer l.Release(true)
	if l.Sandbox.ID() == one {
		t.Errorf("session one got its evicted sandbox back")
	}
}

// TestFileOperations: files uploaded to a session are what its
// executions see, and what they write can be listed and downloaded; a
// path outside the workspace is refused, and a missing session is not
// found.
func TestFileOperations(t *testing.T) {
	u := newUnit(t)
	ctx := t.Context()
	if err := u.m.Upload(ctx, "t", "s", "in/data.txt", strings.NewReader("uploaded")); err != nil {
		t.Fatal(err)
	}
	out, _ := u.f.RunPython(u.t, u.m.Acquirer("t", "s"), "t", "s", "print(open('in/data.txt').read())\nopen('out.txt', 'w').write('written')")
	if out != "uploaded\n" {
		t.Errorf("the execution read %q", out)
	}
	u.clock.Advance(time.Minute)
	entries, err := u.m.List(ctx, "t", "s", "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"in", "out.txt"}) {
		t.Errorf("the workspace lists %v", names)
	}
	var b strings.Builder
	if err := u.m.Download(ctx, "t", "s", "out.txt", &b); err != nil || b.String() != "written" {
		t.Errorf("Download = %q, %v", b.String(), err)
	}
	if info, _ := u.m.Get("t", "s"); !info.LastUsedAt.Equal(u.clock.Now()) {
		t.Errorf("a file operation did not slide the TTL: last used %v", info.LastUsedAt)
	}
	if err := u.m.Remove(ctx, "t", "s", "in/data.txt"); err != nil {
		t.Fatal(err)
	}
	if entries, err := u.m.List(ctx, "t", "s", "in"); err != nil || len(entries) != 0 {
		t.Errorf("after Remove: %v, %v", entries, err)
	}
	for name, err := range map[string]error{
		"upload no path":  u.m.Upload(ctx, "t", "s", "", strings.NewReader("x")),
		"upload outside":  u.m.Upload(ctx, "t", "s", "../x", strings.NewReader("x")),
		"list absolute":   func() error { _, err := u.m.List(ctx, "t", "s", "/etc"); return err }(),
		"download ..":     u.m.Download(ctx, "t", "s", "a/../../b", io.Discard),
		"remove the root": u.m.Remove(ctx, "t", "s", ""),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if err := u.m.Download(ctx, "t", "missing", "out.txt", io.Discard); !errors.Is(err, ErrNotFound) {
		t.Errorf("Download from a missing session: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(u.sessionDir("missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file operation made a missing session: %v", err)
	}
}

// TestCloseKeepsWorkspaces: Close destroys the kept sandboxes; the
// sessions and their files are there for the next start.
func TestCloseKeepsWorkspaces(t *testing.T) {
	u := newUnit(t)
	u.f.RunPython(u.t, u.m.Acquirer("t", "s"), "t", "s", "open('state.txt', 'w').write('kept')")
	u.m.Close()
	if n := u.f.AliveCount(); n != 0 {
		t.Errorf("%d sandboxes live after Close", n)
	}
	u.m = u.open()
	if out, _ := u.f.RunPython(u.t, u.m.Acquirer("t", "s"), "t", "s", "print(open('state.txt').read())"); out != "kept\n" {
		t.Errorf("after a restart the session's file holds %q", out)
	}
}

// TestExpiredFilesAreNotRevived: a file operation on a session past its
// TTL, before the reaper has run, finds no session and removes it; it
// neither touches the old files nor slides the TTL back to life.
func TestExpiredFilesAreNotRevived(t *testing.T) {
	ctx := t.Context()
	for name, op := range map[string]func(m *Manager) error{
		"remove":   func(m *Manager) error { return m.Remove(ctx, "t", "s", "state.txt") },
		"list":     func(m *Manager) error { _, err := m.List(ctx, "t", "s", ""); return err },
		"download": func(m *Manager) error { return m.Download(ctx, "t", "s", "state.txt", io.Discard) },
	} {
		t.Run(name, func(t *testing.T) {
			u := newUnit(t)
			if _, _, err := u.m.Touch(ctx, "t", "s", Options{TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if err := u.m.Upload(ctx, "t", "s", "state.txt", strings.NewReader("turn 1")); err != nil {
				t.Fatal(err)
			}
			u.clock.Advance(2 * time.Minute)
			if err := op(u.m); !errors.Is(err, ErrNotFound) {
				t.Errorf("%s on an expired session: %v, want ErrNotFound", name, err)
			}
			if _, err := u.m.Get("t", "s"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get after %s: %v, want ErrNotFound", name, err)
			}
			if _, err := os.Stat(u.sessionDir("s")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the expired session's files are still there: %v", err)
			}
			if n := u.f.AliveCount(); n != 0 {
				t.Errorf("%d sandboxes live", n)
			}
		})
	}
}

// TestSandboxOnTheSessionsDisk: a session's sandbox is made on the
// session's own disk, of the session's quota; the kept one takes each
// claim's limits.
func TestSandboxOnTheSessionsDisk(t *testing.T) {
	u := newUnit(t)
	if _, _, err := u.m.Touch(t.Context(), "t", "s", Options{DiskMB: 64}); err != nil {
		t.Fatal(err)
	}
	c := u.f.PythonClaim(u.t, runtime.TierContainer)
	l, err := u.m.Acquirer("t", "s").Acquire(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	sb := l.Sandbox.(*fake.Sandbox)
	if got := sb.Limits(); got.DiskBytes != 64<<20 || got.MemoryBytes != c.Spec.Limits.MemoryBytes {
		t.Errorf("the session's sandbox has limits %+v; want a 64 MiB disk and the claim's memory", got)
	}
	if ws := sb.WorkspaceDir(); !strings.HasPrefix(ws, u.sessionDir("s")+string(filepath.Separator)) {
		t.Errorf("the sandbox's workspace %s is not on the session's disk in %s", ws, u.sessionDir("s"))
	}
	l.Release(true)
	c.Spec.Limits.MemoryBytes, c.Spec.Limits.CPUCores = 256<<20, 0.25
	l, err = u.m.Acquirer("t", "s").Acquire(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(true)
	if l.Sandbox.ID() != sb.ID() {
		t.Fatalf("the second claim got %s, not the kept %s", l.Sandbox.ID(), sb.ID())
	}
	if got := sb.Limits(); got.MemoryBytes != 256<<20 || got.CPUCores != 0.25 || got.DiskBytes != 64<<20 {
		t.Errorf("the kept sandbox has limits %+v; want the second claim's, on the same disk", got)
	}
}
