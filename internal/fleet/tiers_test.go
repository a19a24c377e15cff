package fleet_test

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
)

// TestTierSet: a tier without a runtime can be pending; a tier with one
// never is; a runtime added while serving ends the pending state and
// serves; a Snapshot keeps the instant it was taken.
func TestTierSet(t *testing.T) {
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	c, g := runtime.TierContainer, runtime.TierGVisor
	if got := u.f.Tiers(); !slices.Equal(got, []runtime.Tier{c}) {
		t.Fatalf("Tiers = %v, want container only", got)
	}
	if _, ok := u.f.Runtime(g); ok || u.f.Pending(g) {
		t.Fatalf("gvisor: a runtime %v, pending %v; want neither", ok, u.f.Pending(g))
	}
	before := u.f.Snapshot()

	u.f.SetPending(g, true)
	u.f.SetPending(c, true) // has a runtime: never pending
	if !u.f.Pending(g) || u.f.Pending(c) {
		t.Errorf("pending: gvisor %v, container %v; want true, false", u.f.Pending(g), u.f.Pending(c))
	}
	building := u.f.Snapshot()
	if before.Pending(g) {
		t.Error("a snapshot taken before SetPending says pending")
	}
	if !building.Pending(g) || building.Ready(g) || !building.Ready(c) || building.Pending(c) {
		t.Errorf("while building: gvisor pending %v ready %v, container pending %v ready %v",
			building.Pending(g), building.Ready(g), building.Pending(c), building.Ready(c))
	}
	if _, err := u.f.Create(t.Context(), g, runtime.Spec{}, image("a"), fleet.HolderExecution); err == nil {
		t.Error("Create on a pending tier succeeded")
	}

	rt := u.runtime(g, t.TempDir())
	if err := u.f.AddRuntime(rt); err != nil {
		t.Fatal(err)
	}
	if got := u.f.Tiers(); !slices.Equal(got, []runtime.Tier{c, g}) {
		t.Errorf("Tiers after AddRuntime = %v, want both, sorted", got)
	}
	if u.f.Pending(g) {
		t.Error("gvisor still pending with its runtime")
	}
	if r, ok := u.f.Runtime(g); !ok || r != rt {
		t.Errorf("Runtime(gvisor) = %v, %v; want the added one", r, ok)
	}
	if !building.Pending(g) || building.Ready(g) {
		t.Error("an older snapshot changed with AddRuntime")
	}
	if now := u.f.Snapshot(); !now.Ready(g) || now.Pending(g) {
		t.Errorf("after AddRuntime: gvisor ready %v, pending %v", now.Ready(g), now.Pending(g))
	}
	sb := u.create(g, image("a"), fleet.HolderExecution)
	answers(t, sb)

	u.f.SetPending(g, true)
	if u.f.Pending(g) {
		t.Error("a tier with a runtime became pending")
	}
	other := fake.New(g, filepath.Join(t.TempDir(), "other"), os.Args[0], nil)
	if err := u.f.AddRuntime(other); err == nil {
		t.Error("a second gvisor runtime was added")
	}
	if r, _ := u.f.Runtime(g); r != rt {
		t.Error("a refused AddRuntime replaced the runtime")
	}
}

// TestPendingEnds: a build that ends without a runtime leaves the tier
// plainly unavailable.
func TestPendingEnds(t *testing.T) {
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	u.f.SetPending(runtime.TierGVisor, true)
	u.f.SetPending(runtime.TierGVisor, false)
	if s := u.f.Snapshot(); s.Pending(runtime.TierGVisor) || s.Ready(runtime.TierGVisor) {
		t.Errorf("after a failed build: pending %v, ready %v", s.Pending(runtime.TierGVisor), s.Ready(runtime.TierGVisor))
	}
}

// TestSnapshotIsOneInstant: readers taking snapshots while a tier goes
// pending and back, then arrives, never see it both ready and pending,
// nor unready once it was ready.
func TestSnapshotIsOneInstant(t *testing.T) {
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	g := runtime.TierGVisor
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			ready := false
			for {
				select {
				case <-done:
					return
				default:
				}
				s := u.f.Snapshot()
				switch {
				case s.Ready(g) && s.Pending(g):
					errs <- "a snapshot says gvisor is both ready and pending"
					return
				case ready && !s.Ready(g):
					errs <- "a snapshot says gvisor is gone after it was ready"
					return
				}
				ready = s.Ready(g)
			}
		})
	}
	for i := range 1000 {
		u.f.SetPending(g, i%2 == 0)
	}
	u.f.SetPending(g, true)
	if err := u.f.AddRuntime(u.runtime(g, t.TempDir())); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		u.f.SetPending(g, true)
	}
	close(done)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestFixed: what a sandbox keeps from its creation is its runtime's to
// say (fake keeps the disk size, as runc does); a tier without a runtime
// keeps everything.
func TestFixed(t *testing.T) {
	u := newUnit(t, fleet.Config{}, runtime.TierContainer)
	l := runtime.Limits{MemoryBytes: 1, CPUCores: 2, Pids: 3, DiskBytes: 4}
	if got := u.f.Fixed(runtime.TierContainer, l); got != (runtime.Limits{DiskBytes: 4}) {
		t.Errorf("Fixed(container) = %+v, want the disk size only", got)
	}
	if got := u.f.Fixed(runtime.TierGVisor, l); got != l {
		t.Errorf("Fixed(gvisor without a runtime) = %+v, want all of %+v", got, l)
	}
}
