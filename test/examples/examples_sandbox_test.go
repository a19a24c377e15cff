// Package examples builds every program under examples/ and runs it against
// a real corral serve, checking what it prints.
package examples

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// want lists, per example, patterns its output must match, in order.
var want = map[string][]string{
	"execute": {`(?m)^stdout: 4950$`, `status: success, exit code 0, \d+ ms, peak \d+ MB, tier container`,
		`summary for the model:\nsuccess: exit code 0\nstdout \(1 line\):\n4950\nartifacts: none\n`},
	"submitpoll": {`submitted: ex_`, `polled: (queued|running)`, `result: success "step 0\\nstep 1\\nstep 2\\n"`,
		`waited: success "step 0\\nstep 1\\nstep 2\\n"`, `streamed: step 0\nstreamed: step 1\nstreamed: step 2\n`,
		`streamed done: success`},
	"callback": {`submitted: (ex_\w+)`, `callback verified: delivery \S+ for ex_`, `result: ex_\w+ success "hello from a callback\\n"`},
	"errors": {`syntax error +→ compile_error: feed the summary back to the model to fix the code \(next step: fix the code and retry`, `exception +→ runtime_error:`, `endless loop +→ timeout:`,
		`memory balloon +→ oom:`, `unknown language +→ invalid_request: fix field language`,
		`fine +→ success: use the output "ok\\n"`, `unknown id +→ not_found:`},
	"concurrency": {`semaphore: sum of squares = 385`, `MaxConcurrent: sum of squares = 385`},
}

func TestExamples(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	root := testenv.ModuleRoot(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./examples/...")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples: %v\n%s", err, out)
	}
	dirs, err := os.ReadDir(filepath.Join(root, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		name := d.Name()
		if _, err := os.Stat(filepath.Join(root, "examples", name, "package.json")); err == nil {
			continue // a node example (e2b-js): test/e2b runs it
		}
		t.Run(name, func(t *testing.T) {
			patterns, ok := want[name]
			if !ok {
				t.Fatalf("examples/%s has no expected output in this test", name)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, name))
			cmd.Env = append(os.Environ(), srv.Env()...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, out)
			}
			rest := string(out)
			for _, p := range patterns {
				loc := regexp.MustCompile(p).FindStringIndex(rest)
				if loc == nil {
					t.Errorf("%s: output lacks %q (in order)\n%s", name, p, out)
					break
				}
				rest = rest[loc[1]:]
			}
			if strings.Contains(string(out), "level=ERROR") {
				t.Errorf("%s logged an error:\n%s", name, out)
			}
		})
	}
}
