package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/oci"
)

// defaultRunscBuildLock is the lock scripts/deps.sh holds while it builds
// runsc ($CORRAL_CACHE/runsc.lock).
const defaultRunscBuildLock = "/var/cache/corral/runsc.lock"

// runscPoll is how often a server without the gvisor tier looks for
// runsc: a stat and a non-blocking flock, nothing a machine notices.
const runscPoll = 2 * time.Second

// runscWait is the runsc the gvisor tier waits for: where a build
// installs it and the lock the build holds.
type runscWait struct {
	bin, lock string
	// pending: a build held the lock when last looked at.
	pending bool
}

// runscBuilding reports whether scripts/deps.sh is building runsc: it
// holds an exclusive flock on lock from before the build starts until
// runsc is installed (images.Held).
func runscBuilding(lock string) bool { return images.Held(lock) }

// runscBuildLog returns the newest build log next to lock
// (runsc-VERSION.log), for the operator; "" if there is none.
func runscBuildLog(lock string) string {
	logs, _ := filepath.Glob(filepath.Join(filepath.Dir(lock), "runsc-*.log"))
	var newest string
	var at time.Time
	for _, l := range logs {
		if fi, err := os.Stat(l); err == nil && fi.ModTime().After(at) {
			newest, at = l, fi.ModTime()
		}
	}
	return newest
}

// awaitGVisor brings the gvisor tier up once its runsc is installed: it
// creates the runtime, gives it to the engine and calls ready. Until then
// it keeps the engine told whether a build is in progress (the tier is
// pending) or not (unavailable). It returns when the tier is up or ctx
// ends, at once when the tier is here or turned off.
func (l *local) awaitGVisor(ctx context.Context, ready func()) {
	w := l.awaiting
	if w == nil {
		return
	}
	tick := time.NewTicker(runscPoll)
	defer tick.Stop()
	var failed os.FileInfo // a runsc that could not start: not tried again unchanged
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// The lock first: a build installs runsc before it lets go, so a
		// free lock and no runsc mean the build ended without one.
		building := runscBuilding(w.lock)
		if fi, err := os.Stat(w.bin); err == nil && (failed == nil || !os.SameFile(fi, failed)) {
			err := l.addGVisor(ctx, w.bin)
			if err == nil {
				l.log.Info("runsc is installed: the gvisor tier serves", "runsc", w.bin)
				ready()
				return
			}
			if ctx.Err() != nil {
				return
			}
			failed = fi
			l.log.Error("runsc is installed but the gvisor tier cannot start", "runsc", w.bin, "err", err)
		}
		if building == w.pending {
			continue
		}
		w.pending = building
		l.fleet.SetPending(runtime.TierGVisor, building)
		if building {
			l.log.Warn("runsc is being built: work for the gvisor tier is refused as retryable (503 tier_unavailable) until it is installed",
				"runsc", w.bin, "build_log", runscBuildLog(w.lock))
		} else {
			l.log.Warn("the runsc build ended without a usable runsc: the gvisor tier is unavailable, auto runs on the container tier",
				"runsc", w.bin, "build_log", runscBuildLog(w.lock))
		}
	}
}

// addGVisor makes the gvisor runtime from bin and gives it to the engine.
func (l *local) addGVisor(ctx context.Context, bin string) error {
	rt, err := l.newRuntime(ctx, runtime.TierGVisor, bin, oci.GVisorFlags)
	if err != nil {
		return err
	}
	return l.fleet.AddRuntime(rt)
}
