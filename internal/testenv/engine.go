package testenv

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/oci"
)

// CgroupParent is the cgroup under which test sandboxes live, apart from a
// server's, so the leak check can tell them apart.
const CgroupParent = "corral-test"

// CacheDir keeps warmed language caches between test runs on a machine
// (outside the clone, like the runtime builds).
func CacheDir() string {
	if d := os.Getenv("CORRAL_TEST_CACHE"); d != "" {
		return d
	}
	return "/var/cache/corral/test-cache"
}

// Runtimes returns runc and runsc runtimes over dataDir, closed at the end
// of the test.
func Runtimes(t testing.TB, dataDir string) []runtime.Runtime {
	t.Helper()
	RequireRoot(t)
	var rts []runtime.Runtime
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		bin, flags := Runtime(t, "runc"), []string(nil)
		if tier == runtime.TierGVisor {
			bin, flags = Runtime(t, "runsc"), oci.GVisorFlags
		}
		rt, err := oci.New(oci.Config{
			Tier: tier, Binary: bin, Flags: flags, DataDir: dataDir,
			AgentBinary: Agent(t), CgroupParent: CgroupParent, UID: 1000, GID: 1000,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		rts = append(rts, rt)
	}
	return rts
}

// Engine returns an engine with both tiers over a fresh data directory.
// Sandboxes are torn down before Run returns, so a test's cleanup finds
// nothing left.
func Engine(t testing.TB, mutate ...func(*engine.Config)) *engine.Engine {
	t.Helper()
	dir := DataDir(t)
	cfg := engine.DefaultConfig()
	cfg.CacheDir = CacheDir()
	cfg.UID, cfg.GID = 1000, 1000
	for _, m := range mutate {
		m(&cfg)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return newEngine(t, cfg, dir, images.NewStore(filepath.Join(dir, "images"), 1000, 1000), log)
}

// newEngine makes an engine over a fleet of both tiers in dir; both are
// closed at the end of t.
func newEngine(t testing.TB, cfg engine.Config, dir string, imgs engine.ImageResolver, log *slog.Logger) *engine.Engine {
	t.Helper()
	holder, _ := imgs.(fleet.ImageLocker)
	fl := fleet.New(fleet.Config{DestroyAsync: cfg.DestroyAsync}, Runtimes(t, dir), holder, log)
	t.Cleanup(fl.Close)
	e, err := engine.New(cfg, fl, imgs, filepath.Join(dir, "engine"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// Warm fills the language caches once, so tests that time executions do
// not time the warm-up.
func Warm(t testing.TB, e *engine.Engine) {
	t.Helper()
	e.Warm(context.Background(), images.HostName)
}

// DataDir returns a fresh t.TempDir whose parents are searchable by other
// users, as a server's data directory is (/var/lib): root of a live sandbox
// on runc is an unprivileged host user that must reach its root file
// system through it.
func DataDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	top := filepath.Clean(os.TempDir())
	for d := filepath.Dir(dir); strings.HasPrefix(d, top+"/"); d = filepath.Dir(d) {
		if err := oci.Searchable(d); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
