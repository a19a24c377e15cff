package fake_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/runtime"
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
