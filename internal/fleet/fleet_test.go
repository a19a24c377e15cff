package fleet_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
	"github.com/corralhq/corral/internal/testenv"
)

// TestMain serves as the agent of the fake sandboxes the unit tests make;
// fleet_sandbox_test.go holds images of a real store, as root.
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

// wait is how long a test waits for something the fleet does in the
// background: long enough for a loaded machine, never a measure of speed.
const wait = 30 * time.Second

// holds is an ImageLocker that counts the holds a fleet takes and gives
// back, by digest. A release is counted every time it is called, so one
// called twice shows as a negative count. (The image store's own locks
// need an imported image, and importing needs root: see
// fleet_sandbox_test.go.)
type holds struct {
	mu     sync.Mutex
	held   map[string]int
	calls  int
	refuse error // Lock's error when set
}

func (h *holds) Lock(img images.Image) (func(), error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.refuse != nil {
		return nil, h.refuse
	}
	h.held[img.Digest]++
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.held[img.Digest]--
	}, nil
}

// now returns the holds with a count other than zero.
func (h *holds) now() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for d, n := range h.held {
		if n != 0 {
			out[d] = n
		}
	}
	return out
}

func (h *holds) setRefuse(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refuse = err
}

// unit is a fleet over fake runtimes of the given tiers.
type unit struct {
	t     *testing.T
	f     *fleet.Fleet
	rts   map[runtime.Tier]*fake.Runtime
	holds *holds
}

func newUnit(t *testing.T, cfg fleet.Config, tiers ...runtime.Tier) *unit {
	t.Helper()
	if len(tiers) == 0 {
		tiers = []runtime.Tier{runtime.TierContainer, runtime.TierGVisor}
	}
	dir := t.TempDir()
	u := &unit{t: t, rts: map[runtime.Tier]*fake.Runtime{}, holds: &holds{held: map[string]int{}}}
	var rts []runtime.Runtime
	for _, tier := range tiers {
		rt := u.runtime(tier, dir)
		rts = append(rts, rt)
	}
	u.f = fleet.New(cfg, rts, u.holds, nil)
	t.Cleanup(func() {
		u.f.Close()
		// What a test left (a failed teardown on purpose, or a failure):
		// its agents must not outlive the test.
		for _, rt := range u.rts {
			rt.SetHook(nil)
			for _, sb := range rt.Live() {
				sb.Destroy(context.Background())
			}
		}
	})
	return u
}

// runtime makes a fake runtime of tier under dir, one the unit cleans up.
func (u *unit) runtime(tier runtime.Tier, dir string) *fake.Runtime {
	rt := fake.New(tier, filepath.Join(dir, string(tier)), os.Args[0], testWriter{u.t})
	u.rts[tier] = rt
	return rt
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// image is an image the fleet must hold while a sandbox of it lives.
func image(name string) images.Image {
	return images.Image{Name: name, Digest: "sha256:" + name}
}

func (u *unit) create(tier runtime.Tier, img images.Image, holder string) runtime.Sandbox {
	u.t.Helper()
	sb, err := u.f.Create(u.t.Context(), tier, runtime.Spec{}, img, holder)
	if err != nil {
		u.t.Fatalf("create on %s: %v", tier, err)
	}
	return sb
}

// answers checks that sb's agent runs a program.
func answers(t *testing.T, sb runtime.Sandbox) {
	t.Helper()
	st, out := runtimetest.Exec(t, sb, "echo", "here")
	if st.Code != 0 || out.String() != "here\n" {
		t.Fatalf("sandbox %s: %+v, stdout %q, stderr %q", sb.ID(), st, out.String(), out.ErrString())
	}
}

// live lists the ids of the sandboxes rt has not destroyed.
func live(rt *fake.Runtime) []string {
	var ids []string
	for _, sb := range rt.Live() {
		ids = append(ids, sb.ID())
	}
	return ids
}

func (u *unit) wantCount(want map[string]int) {
	u.t.Helper()
	if got := u.f.Count(); !maps.Equal(got, want) {
		u.t.Errorf("Count = %v, want %v", got, want)
	}
}

func (u *unit) wantHolds(want map[string]int) {
	u.t.Helper()
	if got := u.holds.now(); !maps.Equal(got, want) {
		u.t.Errorf("image locks %v, want %v", got, want)
	}
}

func (u *unit) wantHolder(sb runtime.Sandbox, holder string, known bool) {
	u.t.Helper()
	if h, ok := u.f.Holder(sb.ID()); h != holder || ok != known {
		u.t.Errorf("Holder(%s) = %q, %v; want %q, %v", sb.ID(), h, ok, holder, known)
	}
}

// TestCreateHoldDestroy: the registry follows a sandbox from Create to
// Destroy, with its holder and its image's hold; a synchronous fleet has
// torn it down when Destroy returns, and a second Destroy or a Hold of
// what is gone changes nothing.
func TestCreateHoldDestroy(t *testing.T) {
	u := newUnit(t, fleet.Config{})
	c := u.create(runtime.TierContainer, image("c"), fleet.HolderPool)
	g := u.create(runtime.TierGVisor, image("g"), fleet.HolderExecution)
	answers(t, c)
	answers(t, g)
	u.wantHolder(c, fleet.HolderPool, true)
	u.wantCount(map[string]int{fleet.HolderPool: 1, fleet.HolderExecution: 1})
	u.wantHolds(map[string]int{"sha256:c": 1, "sha256:g": 1})

	u.f.Hold(c, fleet.HolderSession, time.Time{})
	u.wantHolder(c, fleet.HolderSession, true)
	u.wantCount(map[string]int{fleet.HolderSession: 1, fleet.HolderExecution: 1})

	root := c.(*fake.Sandbox).WorkspaceDir()
	u.f.Destroy(c)
	u.wantHolder(c, "", false)
	u.wantCount(map[string]int{fleet.HolderExecution: 1})
	u.wantHolds(map[string]int{"sha256:g": 1})
	if ids := live(u.rts[runtime.TierContainer]); len(ids) != 0 {
		t.Errorf("container sandboxes left after a synchronous Destroy: %v", ids)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's directory after Destroy: %v", err)
	}
	if ids := live(u.rts[runtime.TierGVisor]); len(ids) != 1 || ids[0] != g.ID() {
		t.Errorf("gvisor sandboxes %v, want only %s", ids, g.ID())
	}

	u.f.Destroy(c)
	u.f.Hold(c, fleet.HolderPool, time.Now().Add(-time.Hour))
	u.wantHolder(c, "", false)
	u.wantCount(map[string]int{fleet.HolderExecution: 1})
	u.wantHolds(map[string]int{"sha256:g": 1})
	if n := u.f.Sweep(t.Context(), time.Now()); n != 0 {
		t.Errorf("Sweep destroyed %d after a Hold of a destroyed sandbox", n)
	}
	answers(t, g)
}

// TestHostImageIsNotHeld: an image without a digest (the host's) takes
// no hold.
func TestHostImageIsNotHeld(t *testing.T) {
	u := newUnit(t, fleet.Config{})
	sb := u.create(runtime.TierContainer, images.Image{Name: images.HostName}, fleet.HolderExecution)
	u.f.Destroy(sb)
	if u.holds.calls != 0 {
		t.Errorf("%d image locks asked for the host image", u.holds.calls)
	}
}

// TestCreateFailures: a Create that fails leaves nothing registered and
// no image held, whichever step failed.
func TestCreateFailures(t *testing.T) {
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	rt := u.rts[runtime.TierContainer]

	if _, err := u.f.Create(t.Context(), runtime.TierGVisor, runtime.Spec{}, image("a"), fleet.HolderPool); err == nil {
		t.Error("Create on a tier without a runtime succeeded")
	}

	u.holds.setRefuse(images.ErrNotFound)
	if _, err := u.f.Create(t.Context(), runtime.TierContainer, runtime.Spec{}, image("a"), fleet.HolderPool); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("Create of an image that cannot be held: %v, want images.ErrNotFound", err)
	}
	if n := rt.Created(); n != 0 {
		t.Errorf("%d sandboxes created for an image that could not be held", n)
	}
	u.holds.setRefuse(nil)

	broken := errors.New("runtime broken")
	rt.SetHook(func(c fake.Call) error {
		if c.Op == "create" {
			return broken
		}
		return nil
	})
	if _, err := u.f.Create(t.Context(), runtime.TierContainer, runtime.Spec{}, image("a"), fleet.HolderPool); !errors.Is(err, broken) {
		t.Errorf("Create on a failing runtime: %v, want the runtime's error", err)
	}
	u.wantHolds(map[string]int{})
	u.wantCount(map[string]int{})
}

// TestDestroyAsync: a server's fleet forgets a sandbox at once and tears
// it down in the background, holding its image until then; Close waits
// for the teardown.
func TestDestroyAsync(t *testing.T) {
	u := newUnit(t, fleet.Config{DestroyAsync: true}, runtime.TierContainer)
	rt := u.rts[runtime.TierContainer]
	sb := u.create(runtime.TierContainer, image("a"), fleet.HolderExecution)
	entered, gate := make(chan struct{}), make(chan struct{})
	var letGo sync.Once
	t.Cleanup(func() { letGo.Do(func() { close(gate) }) })
	rt.SetHook(func(c fake.Call) error {
		if c.Op == "destroy" && c.Sandbox.ID() == sb.ID() {
			close(entered)
			<-gate
		}
		return nil
	})

	returned := make(chan struct{})
	go func() {
		u.f.Destroy(sb)
		close(returned)
	}()
	for _, step := range []struct {
		ch   chan struct{}
		what string
	}{{entered, "the teardown never started"}, {returned, "Destroy waited for the teardown"}} {
		select {
		case <-step.ch:
		case <-time.After(wait):
			t.Fatal(step.what)
		}
	}
	u.wantHolder(sb, "", false)
	u.wantCount(map[string]int{})
	u.wantHolds(map[string]int{"sha256:a": 1})
	if ids := live(rt); len(ids) != 1 {
		t.Errorf("sandboxes live during the teardown: %v, want the one", ids)
	}

	closed := make(chan struct{})
	go func() {
		u.f.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a teardown ran")
	case <-time.After(100 * time.Millisecond):
	}
	letGo.Do(func() { close(gate) })
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("Close did not return after the teardown")
	}
	u.wantHolds(map[string]int{})
	if ids := live(rt); len(ids) != 0 {
		t.Errorf("sandboxes left after Close: %v", ids)
	}
}

// TestDestroyNow: DestroyNow tears down before it returns even on an
// asynchronous fleet, and reports a teardown that failed; the fleet
// forgets the sandbox and its image's hold either way, once.
func TestDestroyNow(t *testing.T) {
	u := newUnit(t, fleet.Config{DestroyAsync: true}, runtime.TierContainer)
	rt := u.rts[runtime.TierContainer]
	a := u.create(runtime.TierContainer, image("a"), fleet.HolderSession)
	b := u.create(runtime.TierContainer, image("b"), fleet.HolderSession)

	if err := u.f.DestroyNow(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if ids := live(rt); len(ids) != 1 || ids[0] != b.ID() {
		t.Errorf("sandboxes live after DestroyNow: %v, want only %s", ids, b.ID())
	}
	u.wantHolds(map[string]int{"sha256:b": 1})

	broken := errors.New("teardown failed")
	rt.SetHook(func(c fake.Call) error {
		if c.Op == "destroy" {
			return broken
		}
		return nil
	})
	if err := u.f.DestroyNow(t.Context(), b); !errors.Is(err, broken) {
		t.Fatalf("DestroyNow of a sandbox that will not go: %v, want the runtime's error", err)
	}
	u.wantHolder(b, "", false)
	u.wantHolds(map[string]int{})
	answers(t, b) // the runtime did not tear it down: Reap's to find

	rt.SetHook(nil)
	if err := u.f.DestroyNow(t.Context(), b); err != nil {
		t.Fatalf("DestroyNow again: %v", err)
	}
	u.wantHolds(map[string]int{}) // not released twice
	if ids := live(rt); len(ids) != 0 {
		t.Errorf("sandboxes left: %v", ids)
	}
}

// TestSweep destroys exactly the sandboxes held past the time their
// holder said it would let go.
func TestSweep(t *testing.T) {
	u := newUnit(t, fleet.Config{DestroyAsync: true}, runtime.TierContainer)
	rt := u.rts[runtime.TierContainer]
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stuck := u.create(runtime.TierContainer, image("stuck"), fleet.HolderPool)
	later := u.create(runtime.TierContainer, image("later"), fleet.HolderPool)
	never := u.create(runtime.TierContainer, image("never"), fleet.HolderPool)
	cleared := u.create(runtime.TierContainer, image("cleared"), fleet.HolderPool)
	u.f.Hold(stuck, fleet.HolderExecution, now.Add(-time.Second))
	u.f.Hold(later, fleet.HolderExecution, now.Add(time.Hour))
	u.f.Hold(cleared, fleet.HolderExecution, now.Add(-time.Hour))
	u.f.Hold(cleared, fleet.HolderPool, time.Time{}) // back in the pool

	if n := u.f.Sweep(t.Context(), now); n != 1 {
		t.Fatalf("Sweep destroyed %d, want 1", n)
	}
	// Sweep tears down before it returns, whatever DestroyAsync says.
	u.wantHolder(stuck, "", false)
	if slices.Contains(live(rt), stuck.ID()) {
		t.Error("the stuck sandbox is still live after Sweep")
	}
	u.wantHolds(map[string]int{"sha256:later": 1, "sha256:never": 1, "sha256:cleared": 1})
	u.wantCount(map[string]int{fleet.HolderExecution: 1, fleet.HolderPool: 2})
	if n := u.f.Sweep(t.Context(), now); n != 0 {
		t.Errorf("a second Sweep destroyed %d", n)
	}
	if n := u.f.Sweep(t.Context(), now.Add(2*time.Hour)); n != 1 {
		t.Errorf("Sweep past the later deadline destroyed %d, want 1", n)
	}
	u.wantHolder(later, "", false)
	u.wantHolder(never, fleet.HolderPool, true)
	u.wantHolder(cleared, fleet.HolderPool, true)
	answers(t, never)
}
