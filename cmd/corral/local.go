package main

import (
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/oci"
)

// Where scripts/deps.sh installs the pinned runtimes.
const pinnedDir = "/opt/corral"

// sandboxUID and sandboxGID run programs inside sandboxes.
const sandboxUID, sandboxGID = 1000, 1000

// findBinary returns explicit if set, else the pinned build, else PATH.
func findBinary(explicit, name string) string {
	if explicit != "" {
		return explicit
	}
	pinned := filepath.Join(pinnedDir, "bin", name)
	if _, err := os.Stat(pinned); err == nil {
		return pinned
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// agentBinary returns this executable, which must be static to run inside
// sandboxes whose images have no libc of the host's.
func agentBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	// The agent alone (make build puts it next to corral) is leaner than
	// the whole binary; every sandbox runs one.
	if lean := filepath.Join(filepath.Dir(exe), "corral-agent"); staticELF(lean) == nil {
		return lean, nil
	}
	if err := staticELF(exe); err != nil {
		return "", err
	}
	return exe, nil
}

// staticELF checks that path is a statically linked executable, which can
// run as PID 1 of any image.
func staticELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; build corral with CGO_ENABLED=0 (make build) so it can run as the sandbox agent", path)
		}
	}
	return nil
}

// local is this machine's engine and runtimes. A runtime can be added
// after start (awaitGVisor).
type local struct {
	fleet  *fleet.Fleet
	engine *engine.Engine
	log    *slog.Logger
	// rtcfg is what every runtime here shares: data dir, agent, cgroup,
	// sandbox user.
	rtcfg oci.Config
	// awaiting, if set, is the runsc the gvisor tier waits for.
	awaiting *runscWait
	// images is the image store sandboxes run on.
	images *images.Store

	mu       sync.Mutex
	runtimes []*oci.Runtime
}

// Close waits for teardowns and releases the runtimes.
func (l *local) Close() {
	l.engine.Close()
	l.fleet.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, rt := range l.runtimes {
		rt.Close()
	}
}

// newRuntime makes tier's runtime from bin and reaps the sandboxes a
// previous, dead corral process left with it.
func (l *local) newRuntime(ctx context.Context, tier runtime.Tier, bin string, flags []string) (*oci.Runtime, error) {
	cfg := l.rtcfg
	cfg.Tier, cfg.Binary, cfg.Flags = tier, bin, flags
	rt, err := oci.New(cfg)
	if err != nil {
		return nil, err
	}
	reapCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	n, err := rt.Reap(reapCtx)
	cancel()
	if err != nil {
		l.log.Warn("reap leftover sandboxes", "tier", tier, "err", err)
	} else if n > 0 {
		l.log.Info("reaped leftover sandboxes", "tier", tier, "count", n)
	}
	l.mu.Lock()
	l.runtimes = append(l.runtimes, rt)
	l.mu.Unlock()
	return rt, nil
}

// newLocal prepares runtimes, images and an engine on this machine and
// reaps whatever a previous, dead corral process left.
func newLocal(ctx context.Context, lc config.Local, cfg engine.Config, log *slog.Logger) (*local, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("corral must run as root to create sandboxes (namespaces, cgroups, mounts); see corral doctor")
	}
	agentPath, err := agentBinary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(lc.DataDir, 0o711); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	l := &local{log: log, rtcfg: oci.Config{DataDir: lc.DataDir, AgentBinary: agentPath, CgroupParent: lc.CgroupParent,
		UID: sandboxUID, GID: sandboxGID, Log: log}}
	runc := findBinary(lc.Runc, "runc")
	if runc == "" {
		return nil, fmt.Errorf("%w: runc not found; run scripts/deps.sh", runtime.ErrUnavailable)
	}
	if _, err := l.newRuntime(ctx, runtime.TierContainer, runc, nil); err != nil {
		return nil, err
	}
	if lc.Runsc != "off" {
		// Missing runsc is awaited where a build installs it: the one
		// named, else the pinned one.
		w := &runscWait{bin: cmp.Or(lc.Runsc, filepath.Join(pinnedDir, "bin", "runsc")), lock: cmp.Or(lc.RunscBuildLock, defaultRunscBuildLock)}
		runsc := findBinary(lc.Runsc, "runsc")
		if _, err := os.Stat(runsc); runsc == "" || err != nil {
			w.pending = runscBuilding(w.lock)
			switch {
			case w.pending:
				log.Warn("runsc is being built: work for the gvisor tier is refused as retryable (503 tier_unavailable) until it is installed",
					"runsc", w.bin, "build_log", runscBuildLog(w.lock))
			case lc.Runsc == "":
				log.Info("no runsc: the gvisor tier is unavailable, auto runs on the container tier (scripts/deps.sh builds runsc)")
			}
			if w.pending || lc.Runsc == "" {
				l.awaiting, runsc = w, ""
			} // else a runsc named but missing, and no build: oci.New says so
		}
		if runsc != "" {
			if _, err := l.newRuntime(ctx, runtime.TierGVisor, runsc, oci.GVisorFlags); err != nil {
				return nil, err
			}
		}
	}
	store, err := imageStore(lc, log)
	if err != nil {
		return nil, err
	}
	warnMissingDefaults(store, lc.Images.Defaults, log)
	l.images = store
	cfg.CacheDir = lc.CacheDir
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(lc.DataDir, "cache")
	}
	cfg.UID, cfg.GID = sandboxUID, sandboxGID
	rts := make([]runtime.Runtime, len(l.runtimes))
	for i, rt := range l.runtimes {
		rts[i] = rt
	}
	l.fleet = fleet.New(fleet.Config{DestroyAsync: cfg.DestroyAsync}, rts, store, log)
	l.engine, err = engine.New(cfg, l.fleet, store, filepath.Join(lc.DataDir, "engine"), log)
	if err != nil {
		return nil, err
	}
	if l.awaiting != nil && l.awaiting.pending {
		l.fleet.SetPending(runtime.TierGVisor, true)
	}
	return l, nil
}
