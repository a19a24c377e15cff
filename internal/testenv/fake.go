package testenv

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
)

// FakeMain is the TestMain of a package whose tests run fake sandboxes:
// AgentMain, then Main.
func FakeMain(m *testing.M) {
	AgentMain()
	Main(m)
}

// AgentMain makes a test binary the agent of fake sandboxes: a package
// whose tests use FakeEngine calls it first thing in TestMain. When the
// binary was started as "BINARY local ROOT" (by fake.Runtime) it serves
// as the agent and exits; otherwise it returns and the tests run.
func AgentMain() {
	if len(os.Args) == 3 && os.Args[1] == "local" {
		os.Exit(agent.Main(os.Args[1:]))
	}
	// A test binary built with -race sleeps a second as it exits (the race
	// detector's atexit_sleep_ms), and every fake sandbox's teardown waits
	// for its agent to exit: the agents this binary starts skip the sleep.
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=0"))
	}
}

// Fake is an engine over fake runtimes of both tiers (package fake): the
// real engine, fleet and agent protocol, with programs run as the current
// user on the host and nothing limited. It needs no root; it is for
// unit tests of what sits above the engine.
type Fake struct {
	*engine.Engine
	Fleet    *fleet.Fleet
	Runtimes map[runtime.Tier]*fake.Runtime
}

// FakeEngine returns a Fake over a fresh directory, closed at the end of
// the test. The test binary must call AgentMain in its TestMain.
func FakeEngine(t testing.TB, mutate ...func(*engine.Config)) *Fake {
	t.Helper()
	return FakeEngineOf(t, []runtime.Tier{runtime.TierContainer, runtime.TierGVisor}, mutate...)
}

// FakeEngineOf is FakeEngine with runtimes of tiers only: a tier left out
// is missing from its fleet, as gVisor is from a host without runsc (or
// pending, Fleet.SetPending).
func FakeEngineOf(t testing.TB, tiers []runtime.Tier, mutate ...func(*engine.Config)) *Fake {
	t.Helper()
	dir := t.TempDir()
	cfg := engine.DefaultConfig()
	cfg.CacheDir = filepath.Join(dir, "cache")
	cfg.UID, cfg.GID = os.Getuid(), os.Getgid()
	for _, m := range mutate {
		m(&cfg)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := &Fake{Runtimes: map[runtime.Tier]*fake.Runtime{}}
	var rts []runtime.Runtime
	for _, tier := range tiers {
		rt := fake.New(tier, filepath.Join(dir, string(tier)), os.Args[0], testWriter{t})
		f.Runtimes[tier] = rt
		rts = append(rts, rt)
	}
	imgs := images.NewStore(filepath.Join(dir, "images"), os.Getuid(), os.Getgid())
	f.Fleet = fleet.New(fleet.Config{DestroyAsync: cfg.DestroyAsync}, rts, imgs, log)
	t.Cleanup(f.Fleet.Close)
	e, err := engine.New(cfg, f.Fleet, imgs, filepath.Join(dir, "engine"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	f.Engine = e
	return f
}
