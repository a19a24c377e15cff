package main

import (
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
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

type local struct {
	engine   *engine.Engine
	runtimes []*oci.Runtime
}

// Close waits for teardowns and releases the runtimes.
func (l *local) Close() {
	l.engine.Close()
	for _, rt := range l.runtimes {
		rt.Close()
	}
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
	l := &local{}
	runc := findBinary(f.runc, "runc")
	if runc == "" {
		return nil, fmt.Errorf("%w: runc not found; run scripts/deps.sh", runtime.ErrUnavailable)
	}
	tiers := []struct {
		tier  runtime.Tier
		bin   string
		flags []string
	}{
		{runtime.TierContainer, runc, nil},
	}
	if f.runsc != "off" {
		if runsc := findBinary(f.runsc, "runsc"); runsc != "" {
			tiers = append(tiers, struct {
				tier  runtime.Tier
				bin   string
				flags []string
			}{runtime.TierGVisor, runsc, oci.GVisorFlags})
		}
	}
	for _, t := range tiers {
		rt, err := oci.New(oci.Config{
			Tier: t.tier, Binary: t.bin, Flags: t.flags,
			DataDir: f.dataDir, AgentBinary: agentPath, CgroupParent: f.cgroupParent,
			UID: sandboxUID, GID: sandboxGID, Log: log,
		})
		if err != nil {
			return nil, err
		}
		reapCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		n, err := rt.Reap(reapCtx)
		cancel()
		if err != nil {
			log.Warn("reap leftover sandboxes", "tier", t.tier, "err", err)
		} else if n > 0 {
			log.Info("reaped leftover sandboxes", "tier", t.tier, "count", n)
		}
		l.runtimes = append(l.runtimes, rt)
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
	return l, nil
}
