package main

import (
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/oci"
)

// Where scripts/deps.sh installs the pinned runtimes.
const pinnedDir = "/opt/corral"

// sandboxUID and sandboxGID run programs inside sandboxes.
const sandboxUID, sandboxGID = 1000, 1000

// localFlags configure sandboxes on this machine; run and serve share them.
type localFlags struct {
	dataDir      string
	cacheDir     string
	cgroupParent string
	runc         string
	runsc        string
	runscLock    string
	// The image store (image.go): where, how big, and each language's
	// default image.
	imageDir      string
	imageBudget   string
	defaultImages imageMap
}

func (f *localFlags) register(fs *flag.FlagSet) {
	f.registerImages(fs)
	fs.StringVar(&f.cacheDir, "cache-dir", "", "directory for warmed language build caches (default DATA-DIR/cache)")
	fs.StringVar(&f.cgroupParent, "cgroup-parent", "corral", "cgroup under which sandboxes are placed")
	fs.StringVar(&f.runc, "runc", "", "runc binary (default: the pinned one in "+pinnedDir+"/bin, else PATH)")
	fs.StringVar(&f.runsc, "runsc", "", "runsc binary for the gvisor tier (default: pinned, else PATH; \"off\" disables the tier)")
	fs.StringVar(&f.runscLock, "runsc-build-lock", "", "lock scripts/deps.sh holds while it builds runsc: while held and runsc is missing, the gvisor tier is pending (default "+defaultRunscBuildLock+")")
}

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
	engine *engine.Engine
	log    *slog.Logger
	// rtcfg is what every runtime here shares: data dir, agent, cgroup,
	// sandbox user.
	rtcfg oci.Config
	// awaiting, if set, is the runsc the gvisor tier waits for.
	awaiting *runscWait

	mu       sync.Mutex
	runtimes []*oci.Runtime
}

// Close waits for teardowns and releases the runtimes.
func (l *local) Close() {
	l.engine.Close()
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
func newLocal(ctx context.Context, f localFlags, cfg engine.Config, log *slog.Logger) (*local, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("corral must run as root to create sandboxes (namespaces, cgroups, mounts); see corral doctor")
	}
	agentPath, err := agentBinary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(f.dataDir, 0o711); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	l := &local{log: log, rtcfg: oci.Config{DataDir: f.dataDir, AgentBinary: agentPath, CgroupParent: f.cgroupParent,
		UID: sandboxUID, GID: sandboxGID, Log: log}}
	runc := findBinary(f.runc, "runc")
	if runc == "" {
		return nil, fmt.Errorf("%w: runc not found; run scripts/deps.sh", runtime.ErrUnavailable)
	}
	if _, err := l.newRuntime(ctx, runtime.TierContainer, runc, nil); err != nil {
		return nil, err
	}
	if f.runsc != "off" {
		// Missing runsc is awaited where a build installs it: the one
		// named, else the pinned one.
		w := &runscWait{bin: cmp.Or(f.runsc, filepath.Join(pinnedDir, "bin", "runsc")), lock: cmp.Or(f.runscLock, defaultRunscBuildLock)}
		runsc := findBinary(f.runsc, "runsc")
		if _, err := os.Stat(runsc); runsc == "" || err != nil {
			w.pending = runscBuilding(w.lock)
			switch {
			case w.pending:
				log.Warn("runsc is being built: work for the gvisor tier is refused as retryable (503 tier_unavailable) until it is installed",
					"runsc", w.bin, "build_log", runscBuildLog(w.lock))
			case f.runsc == "":
				log.Info("no runsc: the gvisor tier is unavailable, auto runs on the container tier (scripts/deps.sh builds runsc)")
			}
			if w.pending || f.runsc == "" {
				l.awaiting, runsc = w, ""
			} // else a runsc named but missing, and no build: oci.New says so
		}
		if runsc != "" {
			if _, err := l.newRuntime(ctx, runtime.TierGVisor, runsc, oci.GVisorFlags); err != nil {
				return nil, err
			}
		}
	}
	store, err := f.imageStore(log)
	if err != nil {
		return nil, err
	}
	warnMissingDefaults(store, f.defaultImages, log)
	cfg.CacheDir = f.cacheDir
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(f.dataDir, "cache")
	}
	cfg.UID, cfg.GID = sandboxUID, sandboxGID
	rts := make([]runtime.Runtime, len(l.runtimes))
	for i, rt := range l.runtimes {
		rts[i] = rt
	}
	l.engine, err = engine.New(cfg, rts, store, filepath.Join(f.dataDir, "engine"), log)
	if err != nil {
		return nil, err
	}
	if l.awaiting != nil && l.awaiting.pending {
		l.engine.SetPending(runtime.TierGVisor, true)
	}
	return l, nil
}
