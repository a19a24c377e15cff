package pool_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/pool"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes the unit tests use
// (testenv.FakeEngine); pool_sandbox_test.go runs real ones as root.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// wait is how long a unit test waits for the pool to reach a state: long
// enough for a loaded machine, never a measure of speed.
const wait = 30 * time.Second

// clock is the pool's clock in unit tests: it moves only when told.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// unit is a pool of one class over fake sandboxes (no root): python on the
// host image, on the container tier unless the class says otherwise.
type unit struct {
	t     *testing.T
	f     *testenv.Fake
	p     *pool.Pool
	m     *metrics.Metrics
	clock *clock
	warm  pool.Warm
	rt    *fake.Runtime // the class's tier's
	spec  runtime.Spec  // the class's
	img   images.Image
}

func newUnit(t *testing.T, w pool.Warm, mutate ...func(*pool.Config)) *unit {
	t.Helper()
	// No language caches: warming one would make sandboxes of its own.
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	return newUnitOn(t, f, w, mutate...)
}

func newUnitOn(t *testing.T, f *testenv.Fake, w pool.Warm, mutate ...func(*pool.Config)) *unit {
	t.Helper()
	if w.Tier == "" {
		w.Tier = runtime.TierContainer
	}
	if w.Language == "" {
		w.Language = "python"
	}
	w.Image = images.HostName
	cfg := pool.DefaultConfig()
	cfg.Warm = []pool.Warm{w}
	for _, m := range mutate {
		m(&cfg)
	}
	u := &unit{t: t, f: f, m: metrics.New(), clock: newClock(), warm: w, rt: f.Runtimes[w.Tier]}
	var err error
	u.spec, u.img, err = f.WarmSpec(t.Context(), w.Tier, w.Language, images.HostName, w.System)
	if err != nil {
		t.Fatal(err)
	}
	p, skipped := pool.NewAt(context.Background(), f.Fleet, f, cfg, u.m,
		slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelDebug})), u.clock.now)
	if len(skipped) > 0 {
		t.Fatal(skipped)
	}
	t.Cleanup(p.Close) // before the engine's and the fleet's
	u.p = p
	return u
}

// claim is what an execution of tenant asks for: the class's spec, with
// the limits mutate sets.
func (u *unit) claim(tenant string, mutate ...func(*runtime.Spec)) fleet.Claim {
	spec := u.spec
	for _, m := range mutate {
		m(&spec)
	}
	return fleet.Claim{Tier: u.warm.Tier, Spec: spec, Tenant: tenant, Image: u.img}
}

// memory sets a claim's memory limit.
func memory(mb int64) func(*runtime.Spec) {
	return func(s *runtime.Spec) { s.Limits.MemoryBytes = mb << 20 }
}

func (u *unit) acquire(tenant string, mutate ...func(*runtime.Spec)) *fleet.Lease {
	u.t.Helper()
	l, err := u.p.Acquire(u.t.Context(), u.claim(tenant, mutate...))
	if err != nil {
		u.t.Fatal(err)
	}
	return l
}

// waitIdle waits until the pool holds exactly n ready sandboxes.
func (u *unit) waitIdle(n int) {
	u.t.Helper()
	if !testenv.Eventually(u.t, wait, func() bool { return u.p.Idle()[0] == n }) {
		u.t.Fatalf("the pool holds %d ready sandboxes, want %d", u.p.Idle()[0], n)
	}
}

// waitOwned waits until tenant's ready sandboxes are exactly ids.
func (u *unit) waitOwned(tenant string, ids ...string) {
	u.t.Helper()
	if !testenv.Eventually(u.t, wait, func() bool { return slices.Equal(idsOf(u.p.IdleSandboxes(tenant)), ids) }) {
		u.t.Fatalf("tenant %q has ready sandboxes %v, want %v", tenant, idsOf(u.p.IdleSandboxes(tenant)), ids)
	}
}

// waitReset waits until no used sandbox is on its way back to idle: each
// is ready again or destroyed.
func (u *unit) waitReset() {
	u.t.Helper()
	g := u.m.PoolReset.WithLabelValues(string(u.warm.Tier), images.HostName)
	if !testenv.Eventually(u.t, wait, func() bool { return gauge(u.t, g) == 0 }) {
		u.t.Fatalf("%v sandboxes still being reset", gauge(u.t, g))
	}
}

// count reads a counter of the class whose last label is label.
func (u *unit) count(c *prometheus.CounterVec, label string) float64 {
	u.t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(string(u.warm.Tier), images.HostName, label).Write(&m); err != nil {
		u.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// waits counts the claims that waited for a sandbox being reset.
func (u *unit) waits() uint64 {
	u.t.Helper()
	var m dto.Metric
	if err := u.m.PoolWait.WithLabelValues(string(u.warm.Tier)).(prometheus.Metric).Write(&m); err != nil {
		u.t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// live reports whether the sandbox is not destroyed.
func (u *unit) live(id string) bool {
	return slices.ContainsFunc(u.rt.Live(), func(s *fake.Sandbox) bool { return s.ID() == id })
}

// holdCreates holds the refill's creates (those of the class's own spec;
// a cold claim here asks for another memory limit) until the returned
// func is called, or the test ends. It counts the creates it saw.
func (u *unit) holdCreates() (release func(), creates *atomic.Int32) {
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	u.t.Cleanup(release) // before the pool's Close, which waits for the refill
	creates = &atomic.Int32{}
	class := u.spec.Limits.MemoryBytes
	u.rt.SetHook(func(c fake.Call) error {
		if c.Op == "create" && c.Spec.Limits.MemoryBytes == class {
			creates.Add(1)
			<-gate
		}
		return nil
	})
	return release, creates
}

func idsOf(sbs []runtime.Sandbox) []string {
	out := []string{}
	for _, sb := range sbs {
		out = append(out, sb.ID())
	}
	return out
}

func fakeOf(t *testing.T, sb runtime.Sandbox) *fake.Sandbox {
	t.Helper()
	s, ok := sb.(*fake.Sandbox)
	if !ok {
		t.Fatalf("sandbox %s is a %T, not a fake one", sb.ID(), sb)
	}
	return s
}

// TestFillsAndServesWarm: the pool makes MinIdle sandboxes with their
// zygote, no more; a claim is served by one of them with the claim's own
// limits (the disk size is the class's), and the pool makes another.
func TestFillsAndServesWarm(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 2, MaxIdle: 3, Zygote: true})
	u.waitIdle(2)
	fresh := idsOf(u.p.IdleSandboxes(""))
	if n := u.rt.Created(); n != 2 {
		t.Errorf("%d sandboxes made to keep 2 ready", n)
	}
	for _, id := range fresh {
		if h, ok := u.f.Fleet.Holder(id); !ok || h != fleet.HolderPool {
			t.Errorf("ready sandbox %s is held by %q (known %v), want the pool", id, h, ok)
		}
	}
	l := u.acquire("a", memory(256), func(s *runtime.Spec) { s.Limits.CPUCores = 0.5 })
	if !slices.Contains(fresh, l.Sandbox.ID()) {
		t.Fatalf("the claim got sandbox %s, not one of the ready %v", l.Sandbox.ID(), fresh)
	}
	if l.Fate != fleet.Pooled || l.Zygote == nil || l.Zygote.Language != "python" {
		t.Errorf("lease: fate %v, zygote %+v; want a pooled sandbox with its python zygote", l.Fate, l.Zygote)
	}
	want := u.spec.Limits
	want.MemoryBytes, want.CPUCores = 256<<20, 0.5
	if got := fakeOf(t, l.Sandbox).Limits(); got != want {
		t.Errorf("the lent sandbox's limits are %+v, want the claim's %+v", got, want)
	}
	if h, m := u.count(u.m.PoolClaims, "hit"), u.count(u.m.PoolClaims, "miss"); h != 1 || m != 0 {
		t.Errorf("%v hits, %v misses; want 1 hit", h, m)
	}
	u.waitIdle(2) // refilled
	if n := u.rt.Created(); n != 3 {
		t.Errorf("%d sandboxes made, want 3: two, and one to replace the one lent", n)
	}
	l.Release(true)
	u.waitOwned("a", l.Sandbox.ID())
}

// TestResetEmptiesTheSandbox: a sandbox comes back to its tenant with
// /workspace and /tmp emptied, and serves that tenant again.
func TestResetEmptiesTheSandbox(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 2})
	u.waitIdle(1)
	l := u.acquire("a")
	ws := fakeOf(t, l.Sandbox).WorkspaceDir()
	tmp := filepath.Join(filepath.Dir(ws), "tmp")
	for _, p := range []string{filepath.Join(ws, "deep", "leak"), filepath.Join(ws, "leak"), filepath.Join(tmp, "leak")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l.Release(true)
	u.waitOwned("a", l.Sandbox.ID())
	for _, d := range []string{ws, tmp} {
		names, err := os.ReadDir(d)
		if err != nil {
			t.Fatalf("%s after the reset: %v", d, err)
		}
		if len(names) != 0 {
			t.Errorf("%s holds %v after the reset", d, names)
		}
	}
	again := u.acquire("a")
	if again.Sandbox.ID() != l.Sandbox.ID() {
		t.Errorf("tenant a got sandbox %s, not its own %s", again.Sandbox.ID(), l.Sandbox.ID())
	}
	if h := u.count(u.m.PoolClaims, "hit"); h != 2 {
		t.Errorf("%v hits, want 2", h)
	}
	again.Release(true)
}

// TestTenantsNeverShare: a sandbox one tenant used never serves another;
// each gets its own back.
func TestTenantsNeverShare(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 3})
	u.waitIdle(1)
	la := u.acquire("a")
	a := la.Sandbox.ID()
	la.Release(true)
	u.waitOwned("a", a)
	// A fresh one for b: a cold start would grow the class, and a full
	// class destroys a sandbox that comes back.
	u.waitIdle(2)
	var b string
	for i := range 3 {
		lb := u.acquire("b")
		if lb.Sandbox.ID() == a {
			t.Fatalf("tenant b got the sandbox tenant a used (%s)", a)
		}
		if i == 0 {
			b = lb.Sandbox.ID()
		} else if lb.Sandbox.ID() != b {
			t.Errorf("tenant b's claim %d got sandbox %s, not its own %s", i, lb.Sandbox.ID(), b)
		}
		lb.Release(true)
		u.waitOwned("b", b)
	}
	if again := u.acquire("a"); again.Sandbox.ID() != a {
		t.Errorf("tenant a got sandbox %s, not its own %s", again.Sandbox.ID(), a)
	}
}

// TestUncleanReleaseDestroys: a sandbox whose execution did not end clean
// (killed, timed out) is destroyed, never reused.
func TestUncleanReleaseDestroys(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 2})
	u.waitIdle(1)
	l := u.acquire("a")
	id := l.Sandbox.ID()
	l.Release(false)
	if u.live(id) {
		t.Errorf("sandbox %s released unclean is not destroyed", id)
	}
	if h, ok := u.f.Fleet.Holder(id); ok {
		t.Errorf("sandbox %s released unclean is still in the fleet, held by %q", id, h)
	}
	if again := u.acquire("a"); again.Sandbox.ID() == id {
		t.Errorf("the sandbox released unclean served again")
	}
}

// TestMaxUsesDestroys: a sandbox serves MaxUses executions, then is destroyed.
func TestMaxUsesDestroys(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 2}, func(c *pool.Config) { c.MaxUses = 2 })
	u.waitIdle(1)
	l := u.acquire("a")
	id := l.Sandbox.ID()
	l.Release(true)
	u.waitOwned("a", id)
	l = u.acquire("a")
	if l.Sandbox.ID() != id {
		t.Fatalf("the second claim got %s, not the tenant's %s", l.Sandbox.ID(), id)
	}
	l.Release(true)
	if u.live(id) {
		t.Errorf("sandbox %s is not destroyed after its MaxUses executions", id)
	}
	if l = u.acquire("a"); l.Sandbox.ID() == id {
		t.Errorf("sandbox %s served a third execution with MaxUses 2", id)
	}
}

// TestBrokenSandboxIsNotReused: a sandbox whose reset fails (its agent
// is gone) is destroyed; the tenant's next claim gets another.
func TestBrokenSandboxIsNotReused(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 2})
	u.waitIdle(1)
	l := u.acquire("a")
	id := l.Sandbox.ID()
	if err := l.Sandbox.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	l.Release(true) // the execution believed it ended clean
	u.waitReset()
	if u.live(id) || len(u.p.IdleSandboxes("a")) != 0 {
		t.Errorf("sandbox %s, whose reset failed, was kept (live %v, tenant's ready %v)", id, u.live(id), idsOf(u.p.IdleSandboxes("a")))
	}
	if again := u.acquire("a"); again.Sandbox.ID() == id {
		t.Errorf("the broken sandbox served again")
	}
}

// TestReadySandboxThatFailsIsReplaced: a ready sandbox that cannot take a
// claim's limits is destroyed and counted as replaced; the claim is served
// by another sandbox.
func TestReadySandboxThatFailsIsReplaced(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 2})
	u.waitIdle(1)
	bad := u.p.IdleSandboxes("")[0].ID()
	u.rt.SetHook(func(c fake.Call) error {
		if c.Op == "update" && c.Sandbox.ID() == bad {
			return errors.New("cgroup gone")
		}
		return nil
	})
	l := u.acquire("a")
	if l.Sandbox.ID() == bad {
		t.Fatalf("the claim got the sandbox whose update failed")
	}
	if n := u.count(u.m.PoolReplaced, "error"); n != 1 {
		t.Errorf("corral_pool_replaced_total{reason=error} = %v, want 1", n)
	}
	if u.live(bad) {
		t.Errorf("the sandbox whose update failed is not destroyed")
	}
}

// TestDeadReadySandboxIsReplaced: a ready sandbox whose agent died while
// it waited (the host's OOM killer, a runtime crash) is not lent: its
// execution could only fail. It is destroyed and counted as replaced.
func TestDeadReadySandboxIsReplaced(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 2})
	u.waitIdle(1)
	dead := u.p.IdleSandboxes("")[0]
	if err := dead.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	<-dead.Agent().Done()
	l := u.acquire("a")
	if l.Sandbox.ID() == dead.ID() {
		t.Fatalf("the claim got the sandbox whose agent is dead")
	}
	if n := u.count(u.m.PoolReplaced, "error"); n != 1 {
		t.Errorf("corral_pool_replaced_total{reason=error} = %v, want 1", n)
	}
	if u.live(dead.ID()) {
		t.Errorf("the dead sandbox is not destroyed")
	}
}

// TestClaimOverUsage: a tenant's ready sandbox that holds more memory than
// the claim's limit leaves room for (Headroom) is replaced, for that
// reason. A claim tighter than what even a fresh sandbox holds is served
// cold and leaves the fresh ones alone.
func TestClaimOverUsage(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 3})
	u.waitIdle(1)
	l := u.acquire("a")
	used := l.Sandbox.ID()
	l.Release(true)
	u.waitOwned("a", used)
	u.waitIdle(2) // and a fresh one, so that the claim is not a miss
	fakeOf(t, l.Sandbox).SetMemoryUsage(400 << 20)
	l = u.acquire("a", memory(384))
	if l.Sandbox.ID() == used {
		t.Fatalf("a claim for 384 MiB got the sandbox that holds 400 MiB")
	}
	if n := u.count(u.m.PoolReplaced, "limit_below_usage"); n != 1 {
		t.Errorf("corral_pool_replaced_total{reason=limit_below_usage} = %v, want 1", n)
	}
	if n := u.count(u.m.PoolReplaced, "error"); n != 0 {
		t.Errorf("corral_pool_replaced_total{reason=error} = %v, want 0", n)
	}
	if u.live(used) {
		t.Errorf("the replaced sandbox %s is not destroyed", used)
	}
	l.Release(false)

	u.waitIdle(1)
	fresh := idsOf(u.p.IdleSandboxes(""))
	misses := u.count(u.m.PoolClaims, "miss")
	// Under the 32 MiB headroom even a sandbox that holds nothing is too
	// tight: no ready one can serve it.
	l = u.acquire("b", memory(24))
	if slices.Contains(fresh, l.Sandbox.ID()) {
		t.Errorf("a claim for 24 MiB got a fresh sandbox")
	}
	if n := u.count(u.m.PoolClaims, "miss"); n != misses+1 {
		t.Errorf("a claim for 24 MiB was not a cold start (%v misses)", n-misses)
	}
	if n := u.count(u.m.PoolReplaced, "limit_below_usage"); n != 1 {
		t.Errorf("a claim for 24 MiB replaced %v ready sandboxes", n-1)
	}
	// (The refill may add one while the claim holds the fresh one.)
	for _, id := range fresh {
		if !slices.Contains(idsOf(u.p.IdleSandboxes("")), id) {
			t.Errorf("fresh sandbox %s is gone after a claim for 24 MiB", id)
		}
	}
	if got := fakeOf(t, l.Sandbox).Limits().MemoryBytes; got != 24<<20 {
		t.Errorf("the cold sandbox has %d MiB, want the claim's 24", got>>20)
	}
}

// TestGrowsWithMisses: claims that find nothing ready raise the number of
// fresh sandboxes kept, within MaxIdle less the sandboxes out with an
// execution (they come back); a sandbox coming back to a full class is
// destroyed.
func TestGrowsWithMisses(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 0, MaxIdle: 4})
	release, creates := u.holdCreates()
	var leases []*fleet.Lease
	for _, tenant := range []string{"a", "b"} {
		leases = append(leases, u.acquire(tenant, memory(256)))
	}
	if n := u.count(u.m.PoolClaims, "miss"); n != 2 {
		t.Fatalf("%v misses, want 2", n)
	}
	if n := u.p.Idle()[0]; n != 0 {
		t.Fatalf("%d ready while the refill is held", n)
	}
	release()
	u.waitIdle(2)
	// Two more tenants take the fresh ones and a third misses: five out,
	// more than MaxIdle, so the refill makes none although the target is 3.
	for _, tenant := range []string{"c", "d", "e"} {
		leases = append(leases, u.acquire(tenant, memory(256)))
	}
	if n := u.count(u.m.PoolClaims, "miss"); n != 3 {
		t.Fatalf("%v misses, want 3", n)
	}
	u.waitIdle(0)
	if n := creates.Load(); n != 2 {
		t.Errorf("the refill made %d sandboxes, want 2 (room for two beside the two out)", n)
	}
	for _, l := range leases {
		l.Release(true)
	}
	u.waitReset()
	destroyed := 0
	for _, l := range leases {
		if !u.live(l.Sandbox.ID()) {
			destroyed++
		}
	}
	if n := u.p.Idle()[0]; n != 4 || destroyed != 1 {
		t.Errorf("%d ready and %d destroyed after five came back, want MaxIdle 4 and 1", n, destroyed)
	}
	if n := creates.Load(); n != 2 {
		t.Errorf("the refill made %d sandboxes in all, want 2", n)
	}
}

// TestKeepsRoomForWhatIsOut: under a steady load, once a tenant holds
// enough sandboxes, the pool neither makes nor destroys any. The
// sandboxes out with executions keep their room in the class: a refill
// that filled it with fresh ones (misses raise the target) made the ones
// coming back find the class full and be destroyed, the tenant's next
// claims take fresh ones and the refill make more — a create and a
// destroy per execution, each several times an execution's CPU.
func TestKeepsRoomForWhatIsOut(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 0, MaxIdle: 3})
	// Three misses (another tenant's, gone since) raise the target to
	// MaxIdle.
	release, _ := u.holdCreates()
	var gone []*fleet.Lease
	for range 3 {
		gone = append(gone, u.acquire("b", memory(256)))
	}
	release()
	for _, l := range gone {
		l.Release(false)
	}
	u.waitIdle(3)
	var creates atomic.Int32
	u.rt.SetHook(func(c fake.Call) error {
		if c.Op == "create" {
			creates.Add(1)
		}
		return nil
	})
	// Two executions at a time, each round after the last is back.
	round := func() []string {
		l1 := u.acquire("a")
		l2 := u.acquire("a")
		ids := []string{l1.Sandbox.ID(), l2.Sandbox.ID()}
		l1.Release(true)
		l2.Release(true)
		u.waitReset()
		return ids
	}
	for range 3 { // the tenant gets its sandboxes
		round()
	}
	made := creates.Load()
	var used []string
	for range 10 {
		used = append(used, round()...)
	}
	// The refill runs at least once a second: give it a chance.
	time.Sleep(1500 * time.Millisecond)
	if n := creates.Load() - made; n != 0 {
		t.Errorf("%d sandboxes made during 10 rounds at steady load, want none", n)
	}
	for _, id := range used {
		if !u.live(id) {
			t.Errorf("sandbox %s was destroyed under a steady load", id)
		}
	}
}

// TestShrinksWhenIdle: once claims stop missing for IdleTimeout, the pool
// keeps MinIdle fresh sandboxes again, and a tenant's sandbox idle that
// long is destroyed; before that, nothing is.
func TestShrinksWhenIdle(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 6}, func(c *pool.Config) { c.IdleTimeout = time.Minute })
	u.waitIdle(1)
	release, _ := u.holdCreates()
	la := u.acquire("a") // takes the fresh one
	lb := u.acquire("b", memory(256))
	lc := u.acquire("c", memory(256))
	release()
	u.waitIdle(3) // MinIdle and two misses
	la.Release(true)
	u.waitOwned("a", la.Sandbox.ID())
	u.waitIdle(4)
	lb.Release(false)
	lc.Release(false)

	u.clock.advance(59 * time.Second)
	u.p.Expire()
	if n := u.p.Idle()[0]; n != 4 {
		t.Fatalf("%d ready before IdleTimeout, want all 4", n)
	}
	u.clock.advance(2 * time.Second)
	u.p.Expire()
	if n := len(u.p.IdleSandboxes("")); n != 1 {
		t.Errorf("%d fresh sandboxes ready after IdleTimeout, want MinIdle 1", n)
	}
	if u.live(la.Sandbox.ID()) || len(u.p.IdleSandboxes("a")) != 0 {
		t.Errorf("tenant a's sandbox, idle for IdleTimeout, is still there")
	}
	if n := len(u.rt.Live()); n != 1 {
		t.Errorf("%d sandboxes live, want the one kept ready", n)
	}
}

// TestPrefersItsResetToAFreshOne: a tenant with fewer than two sandboxes
// per execution in flight takes a fresh one while its own is being reset
// (so a tenant running one execution after another gets a second sandbox
// and never waits); one with that many waits for its reset instead, which
// costs no create, and gets its own sandbox back.
func TestPrefersItsResetToAFreshOne(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 4}, func(c *pool.Config) { c.ReturnWait = time.Minute })
	u.waitIdle(1)
	hold := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(letGo)
	var held sync.Map // sandbox id -> whose reset waits for hold
	var creates atomic.Int32
	u.rt.SetHook(func(c fake.Call) error {
		if c.Op == "create" {
			creates.Add(1)
		}
		if _, ok := held.Load(c.Sandbox); ok && c.Op == "stats" {
			<-hold
		}
		return nil
	})
	hold1 := func(l *fleet.Lease) {
		held.Store(l.Sandbox, true)
		l.Release(true)
	}
	l1 := u.acquire("a") // the fresh one
	u.waitIdle(1)        // and its replacement
	hold1(l1)
	// One in reset, none out: fewer than two per execution; the claim
	// takes the fresh one rather than wait.
	l2 := u.acquire("a")
	if l2.Sandbox.ID() == l1.Sandbox.ID() || u.waits() != 0 {
		t.Fatalf("the claim waited for the sandbox in reset; want a fresh one")
	}
	u.waitIdle(1)
	hold1(l2)
	made := creates.Load()
	// Two in reset, none out: enough; the claim waits for its own.
	got := make(chan *fleet.Lease, 1)
	go func() {
		l, err := u.p.Acquire(t.Context(), u.claim("a"))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case l := <-got:
		t.Fatalf("the claim took %s while the tenant's two were being reset", l.Sandbox.ID())
	case <-time.After(300 * time.Millisecond):
	}
	letGo()
	l3 := <-got
	if l3 == nil {
		t.FailNow()
	}
	if id := l3.Sandbox.ID(); id != l1.Sandbox.ID() && id != l2.Sandbox.ID() {
		t.Errorf("the claim got %s, want one of the tenant's own", id)
	}
	if n := creates.Load() - made; n != 0 {
		t.Errorf("%d sandboxes made for a claim that waited for its own", n)
	}
	if len(u.p.IdleSandboxes("")) != 1 {
		t.Errorf("the fresh sandbox was taken")
	}
	l3.Release(true)
	u.waitReset()
}

// TestWaitsForItsOwnSandbox: a tenant's claim that finds nothing ready
// while one of its sandboxes is being reset waits for it, up to
// ReturnWait, then starts cold; other tenants never wait for it, and a
// cancelled claim stops waiting.
func TestWaitsForItsOwnSandbox(t *testing.T) {
	for _, tc := range []struct {
		name       string
		returnWait time.Duration
	}{{"back", time.Minute}, {"cold", time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUnit(t, pool.Warm{MinIdle: 0, MaxIdle: 2}, func(c *pool.Config) { c.ReturnWait = tc.returnWait })
			u.holdCreates() // nothing fresh: the tenant's own or a cold one
			l := u.acquire("a", memory(256))
			x := l.Sandbox.ID()
			entered, hold := make(chan struct{}), make(chan struct{})
			var enter, once sync.Once
			letGo := func() { once.Do(func() { close(hold) }) }
			t.Cleanup(letGo)
			u.rt.SetHook(func(c fake.Call) error {
				if c.Op == "stats" && c.Sandbox.ID() == x { // the reset's first step
					enter.Do(func() { close(entered) })
					<-hold
				}
				return nil
			})
			l.Release(true)
			<-entered

			if tc.name == "back" {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				if _, err := u.p.Acquire(ctx, u.claim("a", memory(256))); !errors.Is(err, context.Canceled) {
					t.Errorf("a cancelled claim waiting for its sandbox: %v", err)
				}
			}
			other := u.acquire("b", memory(256))
			if other.Sandbox.ID() == x {
				t.Fatalf("tenant b got tenant a's sandbox")
			}
			other.Release(false)
			waits := u.waits()
			if waits != 0 {
				t.Errorf("%d claims waited; tenant b's must not wait for tenant a's sandbox", waits)
			}

			got := make(chan *fleet.Lease, 1)
			go func() {
				l, err := u.p.Acquire(t.Context(), u.claim("a", memory(256)))
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			if tc.name == "back" {
				letGo()
			}
			again := <-got
			if again == nil {
				return
			}
			defer again.Release(false)
			// The claim may come after the reset ends (then it needs no
			// wait): only a held reset proves that it waits.
			if n := u.waits() - waits; tc.name == "cold" && n != 1 {
				t.Errorf("%d claims of tenant a waited, want 1", n)
			}
			if n := u.count(u.m.PoolClaims, "miss"); tc.name == "back" && n != 2 {
				t.Errorf("%v misses, want 2 (tenant a's first claim and tenant b's): the claim did not wait", n)
			}
			if tc.name == "back" && again.Sandbox.ID() != x {
				t.Errorf("the claim that waited got %s, not the tenant's %s", again.Sandbox.ID(), x)
			}
			if tc.name == "cold" && again.Sandbox.ID() == x {
				t.Errorf("the claim got the sandbox still being reset")
			}
			letGo()
		})
	}
}

// TestCloseDestroysEverything: Close destroys the ready sandboxes, and a
// sandbox lent before it is destroyed when it comes back.
func TestCloseDestroysEverything(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 2, MaxIdle: 2})
	u.waitIdle(2)
	l := u.acquire("a")
	u.p.Close()
	if live := u.rt.Live(); len(live) != 1 || live[0].ID() != l.Sandbox.ID() {
		t.Errorf("after Close, live: %d sandboxes; want only the one lent", len(live))
	}
	l.Release(true)
	if n := len(u.rt.Live()); n != 0 {
		t.Errorf("%d sandboxes left after the lent one came back", n)
	}
	if n := u.p.Idle()[0]; n != 0 {
		t.Errorf("%d ready after Close", n)
	}
}

// TestColdClaimsThePoolCannotServe: a claim for another disk size, a
// session's workspace or another tier gets a sandbox of its own,
// destroyed after its execution; the ready ones are left alone.
func TestColdClaimsThePoolCannotServe(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 1})
	u.waitIdle(1)
	fresh := idsOf(u.p.IdleSandboxes(""))
	for name, change := range map[string]func(*fleet.Claim){
		"disk":      func(c *fleet.Claim) { c.Spec.Limits.DiskBytes = 64 << 20 },
		"workspace": func(c *fleet.Claim) { c.Spec.Workspace = filepath.Join(t.TempDir(), "disk.img") },
		"tier":      func(c *fleet.Claim) { c.Tier = runtime.TierGVisor },
	} {
		cl := u.claim("a")
		change(&cl)
		l, err := u.p.Acquire(t.Context(), cl)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		id := l.Sandbox.ID()
		if h, _ := u.f.Fleet.Holder(id); h != fleet.HolderExecution {
			t.Errorf("%s: the sandbox is held by %q, want an execution's fresh one", name, h)
		}
		l.Release(true)
		if _, ok := u.f.Fleet.Holder(id); ok {
			t.Errorf("%s: the sandbox is still in the fleet after its execution", name)
		}
	}
	if h, m := u.count(u.m.PoolClaims, "hit"), u.count(u.m.PoolClaims, "miss"); h+m != 0 {
		t.Errorf("%v hits and %v misses counted for claims of no class", h, m)
	}
	if got := idsOf(u.p.IdleSandboxes("")); !slices.Equal(got, fresh) {
		t.Errorf("ready sandboxes %v, before %v", got, fresh)
	}
}

// TestColdSandboxStartsItsZygote: a sandbox made cold for a claim of a
// class with a zygote starts the zygote after its first execution, back
// at the class's limits, so that its tenant's next execution forks.
func TestColdSandboxStartsItsZygote(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 0, MaxIdle: 2, Zygote: true})
	u.holdCreates()
	l := u.acquire("a", memory(256))
	if l.Zygote != nil {
		t.Fatalf("a cold sandbox came with a zygote: its claim would have waited for it")
	}
	l.Release(true)
	u.waitOwned("a", l.Sandbox.ID())
	if got := fakeOf(t, l.Sandbox).Limits(); got != u.spec.Limits {
		t.Errorf("the ready sandbox's limits are %+v, want the class's %+v", got, u.spec.Limits)
	}
	again := u.acquire("a", memory(256))
	if again.Sandbox.ID() != l.Sandbox.ID() || again.Zygote == nil {
		t.Errorf("tenant a got %s with zygote %+v; want its %s with one", again.Sandbox.ID(), again.Zygote, l.Sandbox.ID())
	}
}

// TestClassWithoutAZygote: a class whose zygote cannot start (bash has
// none) keeps nothing ready and leaves no sandbox behind; its claims are
// served cold, and their sandboxes are not kept without the zygote.
func TestClassWithoutAZygote(t *testing.T) {
	u := newUnit(t, pool.Warm{Language: "bash", MinIdle: 1, MaxIdle: 1, Zygote: true})
	if !testenv.Eventually(t, wait, func() bool { return u.rt.Created() > 0 && len(u.rt.Live()) == 0 }) {
		t.Fatalf("made %d sandboxes, %d live; want them tried and destroyed", u.rt.Created(), len(u.rt.Live()))
	}
	l := u.acquire("a")
	if l.Zygote != nil {
		t.Errorf("a bash sandbox with a zygote")
	}
	id := l.Sandbox.ID()
	l.Release(true)
	u.waitReset()
	if u.live(id) {
		t.Errorf("the cold sandbox was kept without its zygote")
	}
	if n := u.p.Idle()[0]; n != 0 {
		t.Errorf("%d ready", n)
	}
}

// TestSkipsClassesItCannotServe: a class of an unknown language or image
// is left out and reported; the others start.
func TestSkipsClassesItCannotServe(t *testing.T) {
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	cfg := pool.DefaultConfig()
	cfg.Warm = []pool.Warm{
		{Tier: runtime.TierContainer, Language: "cobol", MinIdle: 1},
		{Tier: runtime.TierContainer, Image: "no-such-image", MinIdle: 1},
		{Tier: runtime.TierContainer, Image: images.HostName, MinIdle: 1},
	}
	p, skipped := pool.New(t.Context(), f.Fleet, f, cfg, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	if len(skipped) != 2 || !strings.Contains(skipped[0].Error(), "cobol") || !strings.Contains(skipped[1].Error(), "no-such-image") {
		t.Errorf("skipped %v; want the cobol and no-such-image classes", skipped)
	}
	if !testenv.Eventually(t, wait, func() bool { return slices.Equal(p.Idle(), []int{1}) }) {
		t.Errorf("classes hold %v ready, want one class with 1", p.Idle())
	}
}

// TestAddTierStartsClass: a class left out because the fleet had no runtime for its
// tier starts when the tier arrives, once.
func TestAddTierStartsClass(t *testing.T) {
	dir := t.TempDir()
	container := fake.New(runtime.TierContainer, filepath.Join(dir, "container"), os.Args[0], testLog{t})
	gvisor := fake.New(runtime.TierGVisor, filepath.Join(dir, "gvisor"), os.Args[0], testLog{t})
	store := images.NewStore(filepath.Join(dir, "images"), os.Getuid(), os.Getgid())
	fl := fleet.New(fleet.Config{}, []runtime.Runtime{container}, store, nil)
	t.Cleanup(fl.Close)
	cfg := engine.DefaultConfig()
	cfg.UID, cfg.GID = os.Getuid(), os.Getgid()
	e, err := engine.New(cfg, fl, store, filepath.Join(dir, "engine"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	f := &testenv.Fake{Engine: e, Fleet: fl, Runtimes: map[runtime.Tier]*fake.Runtime{runtime.TierContainer: container, runtime.TierGVisor: gvisor}}

	pc := pool.DefaultConfig()
	pc.Warm = []pool.Warm{{Image: images.HostName, Tier: runtime.TierGVisor, MinIdle: 1, MaxIdle: 1}}
	p, skipped := pool.New(t.Context(), fl, e, pc, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(p.Close)
	if len(skipped) != 1 || len(p.Idle()) != 0 {
		t.Fatalf("without the tier: skipped %v, classes %v; want the class left out", skipped, p.Idle())
	}
	if err := fl.AddRuntime(gvisor); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if skipped := p.AddTier(t.Context(), runtime.TierGVisor); len(skipped) != 0 {
			t.Fatal(skipped)
		}
	}
	if !testenv.Eventually(t, wait, func() bool { return slices.Equal(p.Idle(), []int{1}) }) {
		t.Fatalf("classes hold %v ready, want one gvisor class with 1", p.Idle())
	}
	ready := idsOf(p.IdleSandboxes(""))
	spec, img, err := f.WarmSpec(t.Context(), runtime.TierGVisor, "python", images.HostName, false)
	if err != nil {
		t.Fatal(err)
	}
	l, err := p.Acquire(t.Context(), fleet.Claim{Tier: runtime.TierGVisor, Spec: spec, Tenant: "a", Image: img})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(false)
	if !slices.Contains(ready, l.Sandbox.ID()) {
		t.Errorf("a gvisor claim got %s, not the ready %v", l.Sandbox.ID(), ready)
	}
	if n := container.Created(); n != 0 {
		t.Errorf("%d container sandboxes made for a gvisor class", n)
	}
}

// sandboxSink records which sandbox an execution ran in.
type sandboxSink struct{ id string }

func (s *sandboxSink) Stdout([]byte)     {}
func (s *sandboxSink) Stderr([]byte)     {}
func (s *sandboxSink) Sandbox(id string) { s.id = id }

// TestExecutionsThroughThePool: the engine's executions take their
// sandbox from the pool and give it back; the tenant's next execution runs
// in the same sandbox, forked by its zygote, and finds nothing of the
// last one.
func TestExecutionsThroughThePool(t *testing.T) {
	u := newUnit(t, pool.Warm{MinIdle: 1, MaxIdle: 2, Zygote: true})
	u.waitIdle(1)
	fresh := idsOf(u.p.IdleSandboxes(""))
	run := func(code string) (sandbox.Result, string) {
		t.Helper()
		job, err := u.f.Prepare(sandbox.ExecuteRequest{Language: "python", Code: code, Isolation: sandbox.Isolation(runtime.TierContainer)})
		if err != nil {
			t.Fatal(err)
		}
		job.Tenant = "a"
		if err := u.f.Acquire(t.Context(), job, u.p); err != nil {
			t.Fatal(err)
		}
		var sink sandboxSink
		res := u.f.Run(t.Context(), job, &sink)
		if res.Status != sandbox.StatusSuccess {
			t.Fatalf("execution %s: %+v\n%s", res.Status, res.Error, res.Stderr)
		}
		return res, sink.id
	}
	_, first := run(`
import os
os.makedirs('output/deep')
open('leak', 'w').write('x')
open(os.path.join(os.environ['TMPDIR'], 'leak'), 'w').write('x')
print('ok')`)
	if !slices.Contains(fresh, first) {
		t.Errorf("the first execution ran in %s, not the ready %v", first, fresh)
	}
	u.waitOwned("a", first)
	res, second := run(`
import os
print(sorted(os.listdir('.')), 'leak' in os.listdir(os.environ['TMPDIR']))`)
	if second != first {
		t.Errorf("the second execution ran in %s, not the tenant's %s", second, first)
	}
	if res.Stdout != "[] False\n" {
		t.Errorf("the second execution saw %q of the first", res.Stdout)
	}
	if h := u.count(u.m.PoolClaims, "hit"); h != 2 {
		t.Errorf("%v hits, want 2", h)
	}
}
