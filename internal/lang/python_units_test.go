//go:build linux

package lang_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pythonUnitsTimeout bounds one python test file's run.
const pythonUnitsTimeout = 2 * time.Minute

// ranTests is unittest's count of the tests it ran.
var ranTests = regexp.MustCompile(`(?m)^Ran (\d+) tests? in `)

// TestPythonUnits runs the unit tests of Corral's python files (each
// *_test.py here, beside the module it tests), each file in an interpreter
// of its own, as `python3 -m unittest` runs them from this directory. A
// file that runs no test, or skips one, fails: the unit lane allows no
// skip.
func TestPythonUnits(t *testing.T) {
	needPython(t)
	files, err := filepath.Glob("*_test.py")
	if err != nil || len(files) == 0 {
		t.Fatalf("no python tests here: %v", err)
	}
	for _, f := range files {
		module := strings.TrimSuffix(f, ".py")
		t.Run(module, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), pythonUnitsTimeout)
			defer cancel()
			// -B: the tree may not be writable (the unit lane runs as
			// nobody), and nothing is left in it.
			cmd := exec.CommandContext(ctx, hostPython, "-B", "-m", "unittest", "-v", module)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
			cmd.WaitDelay = time.Second
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", f, err, out)
			}
			if m := ranTests.FindSubmatch(out); m == nil || string(m[1]) == "0" {
				t.Fatalf("%s ran no test:\n%s", f, out)
			}
			if strings.Contains(string(out), "skipped") {
				t.Errorf("%s skipped a test:\n%s", f, out)
			}
		})
	}
}
