package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// HostPython is the host image's interpreter, which tests run outside a
// sandbox (the pool's sandboxes run it too).
const HostPython = "/usr/bin/python3"

// NeedPython skips (or, when strict, fails) t without HostPython.
func NeedPython(t testing.TB) {
	t.Helper()
	_, err := os.Stat(HostPython)
	Need(t, err == nil, HostPython+" (tests of Corral's python run it outside a sandbox)")
}

// pythonEvalDriver loads argv[1] as a module named other than __main__, so
// that a script's entry point does not run, and prints the value of the
// expression argv[2], evaluated in it, as JSON.
const pythonEvalDriver = `import json, sys
ns = {'__name__': 'corral_eval'}
exec(compile(sys.argv[1], '<program>', 'exec'), ns)
json.dump(eval(sys.argv[2], ns), sys.stdout)
`

// PythonEval evaluates expr in program, a python script as Corral passes it
// to `python3 -c` (with the modules Go delivers with it, internal/lang),
// loaded as a module, and returns the value as JSON.
func PythonEval(t testing.TB, program, expr string) []byte {
	t.Helper()
	NeedPython(t)
	cmd := exec.Command(HostPython, "-B", "-c", pythonEvalDriver, program, expr)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("evaluate %s: %v\n%s", expr, err, stderr.Bytes())
	}
	return out
}
