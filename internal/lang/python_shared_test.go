//go:build linux

package lang_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/testenv"
)

// TestPythonSharedWithGo checks what the python scripts, as Go delivers
// them, share with this package's Go: the zygote serves the Run step
// python's Plan makes (its argv's shape, its fds), precompiles the wrapper
// that step passes (ARGV_CODE), and starts with the step's environment
// (its probe's, and a request's that finds it in place);
// the context runner's matplotlib backend is the one ContextEnv names.
// (What they share with internal/agent and internal/kernel is checked
// there: TestPythonZygoteProtocol, TestPythonRawEndMark.)
func TestPythonSharedWithGo(t *testing.T) {
	r, ok := lang.Get("python")
	if !ok {
		t.Fatal("no python runner")
	}
	run := r.Plan("print(1)").Run
	zygote := r.(lang.Zygoter).ZygoteStep(nil)
	fds := 3
	if run.StatusFD {
		fds++
	}
	argv, _ := json.Marshal(run.Argv)
	var z struct {
		Servable bool `json:"servable"`
		ArgvCode int  `json:"argv_code"`
	}
	expr := fmt.Sprintf(`{'servable': servable({KEY_ARGV: %s}, list(range(%d))), 'argv_code': ARGV_CODE}`, argv, fds)
	if err := json.Unmarshal(testenv.PythonEval(t, zygote.Argv[2], expr), &z); err != nil {
		t.Fatal(err)
	}
	if !z.Servable {
		t.Errorf("the zygote does not serve the Run step %q with %d fds", run.Argv[:2], fds)
	}
	if z.ArgvCode >= len(run.Argv) || run.Argv[z.ArgvCode] != zygote.Argv[3] {
		t.Errorf("the zygote takes a request's code at argv[%d], the Run step's wrapper is not there", z.ArgvCode)
	}
	for _, kv := range run.Env {
		if !slices.Contains(zygote.Env, kv) {
			t.Errorf("the zygote (and its probe) starts without %s, which the Run step sets: %q", kv, zygote.Env)
		}
	}

	var backend string
	program := r.(lang.Contexter).ContextStep().Argv[2]
	if err := json.Unmarshal(testenv.PythonEval(t, program, "MPL_BACKEND"), &backend); err != nil {
		t.Fatal(err)
	}
	var env string
	for _, kv := range r.(lang.Contexter).ContextEnv() {
		if v, ok := strings.CutPrefix(kv, "MPLBACKEND="); ok {
			env = v
		}
	}
	if env != backend {
		t.Errorf("contexts get MPLBACKEND=%s, the runner's backend is %s", env, backend)
	}
}
