package hostile

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/runtime/oci"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestHostOOMIsNotTheProgramsFault: a program killed by the OOM killer
// while its sandbox was below its own memory limit was killed because
// memory ran out above the sandbox (the host's, or a cgroup's over it),
// which is Corral's problem: a retryable internal_error, on both tiers,
// never the program's oom or runtime_error (on gVisor the kill ends the
// Sentry, and with it the agent). The shortage is made safely: the
// sandboxes' parent cgroup gets a memory limit below theirs, so the kernel
// kills inside that parent only.
func TestHostOOMIsNotTheProgramsFault(t *testing.T) {
	testenv.RequireRoot(t)
	const parentMB, sandboxMB = 160, 512
	parent := fmt.Sprintf("%s/host-oom-%d", testenv.CgroupParent, os.Getpid())
	if err := makeLimitedCgroup(parent, parentMB<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cgroup.Remove("/" + parent); err != nil {
			t.Errorf("remove %s: %v", parent, err)
		}
	})
	e := engineUnder(t, parent)
	for _, tier := range tiers {
		t.Run(string(tier), func(t *testing.T) {
			res := run(t, e, sandbox.ExecuteRequest{Language: "python", Isolation: tier,
				Limits: sandbox.Limits{MemoryMB: sandboxMB, TimeoutMS: 60_000},
				Code: `chunks = []
for _ in range(40):
    chunks.append(b'x' * (10 << 20))
print('survived', flush=True)
`})
			if res.Error == nil || res.Error.Type != sandbox.ErrInternal || !res.Error.Retryable {
				t.Fatalf("%s %+v (stdout %q, peak %d MB), want a retryable internal_error", res.Status, res.Error, res.Stdout, res.PeakMemoryMB)
			}
			t.Logf("%s: %s (peak %d MB)", res.Error.Type, res.Error.Message, res.PeakMemoryMB)
			if !strings.Contains(res.Error.Message, "ran out of memory") {
				t.Errorf("message %q does not say memory ran out", res.Error.Message)
			}
			for _, h := range res.LimitsHit {
				if h.Limit == sandbox.LimitMemory {
					t.Errorf("limits_hit lists the sandbox's memory: %+v", h)
				}
			}
		})
	}
}

// makeLimitedCgroup makes the cgroup path (under the cgroup root) with a
// memory limit, swap included; the runtimes make its children.
func makeLimitedCgroup(path string, bytes int64) error {
	limit := []byte(strconv.FormatInt(bytes, 10))
	if cgroup.Unified() {
		d := filepath.Join(cgroup.Root, path)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cgroup.Root, testenv.CgroupParent, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(d, "memory.max"), limit, 0); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(d, "memory.swap.max"), []byte("0"), 0)
	}
	d := filepath.Join(cgroup.Root, "memory", path)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "memory.limit_in_bytes"), limit, 0); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(d, "memory.memsw.limit_in_bytes")); err == nil {
		return os.WriteFile(filepath.Join(d, "memory.memsw.limit_in_bytes"), limit, 0)
	}
	return nil
}

// engineUnder is testenv.Engine with its sandboxes under cgroupParent.
func engineUnder(t *testing.T, cgroupParent string) *engine.Engine {
	dir := t.TempDir()
	var rts []runtime.Runtime
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		bin, flags := testenv.Runtime(t, "runc"), []string(nil)
		if tier == runtime.TierGVisor {
			bin, flags = testenv.Runtime(t, "runsc"), oci.GVisorFlags
		}
		rt, err := oci.New(oci.Config{Tier: tier, Binary: bin, Flags: flags, DataDir: dir,
			AgentBinary: testenv.Agent(t), CgroupParent: cgroupParent, UID: 1000, GID: 1000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Close() })
		rts = append(rts, rt)
	}
	cfg := engine.DefaultConfig()
	cfg.CacheDir = testenv.CacheDir()
	cfg.UID, cfg.GID = 1000, 1000
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	imgs := images.NewStore(filepath.Join(dir, "images"), 1000, 1000)
	fl := fleet.New(fleet.Config{}, rts, imgs, log)
	t.Cleanup(fl.Close)
	e, err := engine.New(cfg, fl, imgs, filepath.Join(dir, "engine"), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}
