package fake_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) {
	testenv.AgentMain()
	os.Exit(m.Run())
}

// TestEngineRuns: the engine runs executions end to end in fake sandboxes,
// without root: output, exit codes, a timeout's verdict, and the sandbox
// gone afterwards.
func TestEngineRuns(t *testing.T) {
	f := testenv.FakeEngine(t)
	for _, tc := range []struct {
		name, lang, code string
		status           sandbox.Status
		stdout           string
		verdict          sandbox.ErrorType
	}{
		{"python", "python", "print(6*7)", sandbox.StatusSuccess, "42\n", ""},
		{"bash exit", "bash", "echo hi; exit 3", sandbox.StatusFailed, "hi\n", sandbox.ErrRuntime},
		{"cwd is the workspace", "python", "import os; print(os.path.basename(os.getcwd()))", sandbox.StatusSuccess, "workspace\n", ""},
		{"timeout", "python", "import time; time.sleep(30)", sandbox.StatusFailed, "", sandbox.ErrTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := sandbox.ExecuteRequest{Language: tc.lang, Code: tc.code}
			if tc.verdict == sandbox.ErrTimeout {
				req.Limits = sandbox.Limits{TimeoutMS: 500}
			}
			job, err := f.Prepare(req)
			if err != nil {
				t.Fatal(err)
			}
			res := f.Run(t.Context(), job, nil)
			if res.Status != tc.status || res.Stdout != tc.stdout {
				t.Errorf("status %s, stdout %q; want %s, %q (%s)", res.Status, res.Stdout, tc.status, tc.stdout, res.Summary)
			}
			var got sandbox.ErrorType
			if res.Error != nil {
				got = res.Error.Type
			}
			if got != tc.verdict {
				t.Errorf("verdict %q, want %q (%s)", got, tc.verdict, res.Summary)
			}
		})
	}
	for tier, rt := range f.Runtimes {
		if live := rt.Live(); len(live) != 0 {
			t.Errorf("%s: %d sandboxes left", tier, len(live))
		}
		if tier == runtime.TierContainer && rt.Created() == 0 {
			t.Errorf("%s: no sandbox was made", tier)
		}
	}
}

// TestSessionRootOutlives: a sandbox on a workspace keeps its files there
// after it is destroyed, for the next sandbox on the same workspace.
func TestSessionRootOutlives(t *testing.T) {
	dir := t.TempDir()
	rt := fakeRuntime(t, dir)
	ws := filepath.Join(dir, "sess", "disk.img")
	for i, code := range []string{"echo kept > /workspace/f", "cat /workspace/f"} {
		sb, err := rt.Create(t.Context(), runtime.Spec{Workspace: ws})
		if err != nil {
			t.Fatal(err)
		}
		out := run(t, sb, "sh", "-c", strings.ReplaceAll(code, "/workspace/", "$HOME/"))
		if i == 1 && out != "kept\n" {
			t.Errorf("second sandbox read %q", out)
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHookAndLimits: a hook's error is the operation's and leaves the
// sandbox as it was; Update keeps the disk size from creation (Fixed),
// like runc; SetStats holds until ResetStats.
func TestHookAndLimits(t *testing.T) {
	rt := fakeRuntime(t, t.TempDir())
	broken := errors.New("broken")
	rt.SetHook(func(c fake.Call) error {
		if c.Op == "create" && c.Spec.Limits.Pids == 13 {
			return broken
		}
		if c.Op == "update" && c.Limits.MemoryBytes == 1 {
			return broken
		}
		if c.Op == "destroy" && c.Sandbox.Limits().CPUCores == 13 {
			return broken
		}
		return nil
	})
	if _, err := rt.Create(t.Context(), runtime.Spec{Limits: runtime.Limits{Pids: 13}}); !errors.Is(err, broken) {
		t.Fatalf("Create under a failing hook: %v", err)
	}
	if rt.Created() != 0 {
		t.Fatalf("a refused Create counted: %d", rt.Created())
	}
	created := runtime.Limits{MemoryBytes: 64 << 20, DiskBytes: 10 << 20}
	sb, err := rt.Create(t.Context(), runtime.Spec{Limits: created})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	s := sb.(*fake.Sandbox)
	if err := s.Update(t.Context(), runtime.Limits{MemoryBytes: 1}); !errors.Is(err, broken) || s.Limits() != created {
		t.Errorf("Update under a failing hook: %v, limits %+v", err, s.Limits())
	}
	if err := s.Update(t.Context(), runtime.Limits{MemoryBytes: 32 << 20, DiskBytes: 99}); err != nil {
		t.Fatal(err)
	}
	if want := (runtime.Limits{MemoryBytes: 32 << 20, DiskBytes: 10 << 20}); s.Limits() != want {
		t.Errorf("limits after Update %+v, want %+v", s.Limits(), want)
	}
	if got := rt.Fixed(runtime.Limits{MemoryBytes: 1, CPUCores: 2, Pids: 3, DiskBytes: 4}); got != (runtime.Limits{DiskBytes: 4}) {
		t.Errorf("Fixed = %+v, want the disk size only", got)
	}
	s.SetMemoryUsage(5 << 20)
	if n, err := s.MemoryUsage(); n != 5<<20 || err != nil {
		t.Errorf("MemoryUsage = %d, %v", n, err)
	}
	hit := runtime.Stats{OOMKills: 1, PidsLimitHits: 2, DiskFull: true}
	s.SetStats(hit)
	if st, err := s.Stats(t.Context()); st != hit || err != nil {
		t.Errorf("Stats after SetStats = %+v, %v; want %+v", st, err, hit)
	}
	if err := s.ResetStats(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(t.Context()); st != (runtime.Stats{}) || err != nil {
		t.Errorf("Stats after ResetStats = %+v, %v; want none", st, err)
	}

	stuck, err := rt.Create(t.Context(), runtime.Spec{Limits: runtime.Limits{CPUCores: 13}})
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Destroy(t.Context()); !errors.Is(err, broken) {
		t.Fatalf("Destroy under a failing hook: %v", err)
	}
	if out := run(t, stuck, "echo", "alive"); out != "alive\n" {
		t.Errorf("a sandbox whose Destroy failed printed %q; want it running on", out)
	}
	rt.SetHook(nil)
	if err := stuck.Destroy(t.Context()); err != nil || len(rt.Live()) != 1 {
		t.Errorf("Destroy without the hook: %v, %d sandboxes live; want the first only", err, len(rt.Live()))
	}
}
