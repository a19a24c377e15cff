package sandboxes

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/test/testserver"
)

// blocks returns the code blocks of a markdown file fenced as lang.
func blocks(t *testing.T, file, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// inOrder checks that out matches each pattern, in order.
func inOrder(t *testing.T, what, out string, patterns []string) {
	t.Helper()
	rest := out
	for _, p := range patterns {
		loc := regexp.MustCompile(p).FindStringIndex(rest)
		if loc == nil {
			t.Errorf("%s: output lacks %q (in order)\n%s", what, p, out)
			return
		}
		rest = rest[loc[1]:]
	}
}

// TestDocExamples runs the examples of docs/sandboxes.md: its shell blocks
// in order as one script (curl and jq against a real server), and its Go
// program.
func TestDocExamples(t *testing.T) {
	s := testserver.Start(t, testserver.Options{NoPool: true})
	root := testenv.ModuleRoot(t)
	doc := filepath.Join(root, "docs", "sandboxes.md")

	t.Run("curl", func(t *testing.T) {
		sh := blocks(t, doc, "sh")
		if len(sh) != 10 {
			t.Fatalf("%d shell blocks in docs/sandboxes.md, want 10", len(sh))
		}
		cmd := exec.CommandContext(t.Context(), "bash", "-c", "set -euo pipefail\n"+strings.Join(sh, "\n"))
		cmd.Env = append(os.Environ(), s.Env()...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the shell examples: %v\n%s", err, out)
		}
		inOrder(t, "shell examples", string(out), []string{
			`sandbox (sbx_\w+)\n`, `running\ncontainer\n`, `sbx_\w+\n`, `600\n`,
			`200\n`, `hello through cat\n`, `\{"exit_code":143,"signal":"SIGTERM"\}\n`,
			`\d+ web running=false\n`,
			`/workspace/data/in.csv\n8\n`, `a,b\n1,2\n`, `dir /workspace/data\nfile /workspace/data/in.csv\n`, `dir\n`, `dir\n`, `/workspace/data/sub/in.csv\n`,
			`\[.*\]\n`,
			`paused\nfalse\n`, `409\n`, `running\nfalse\n`, `kept\n`,
			`kept\n`, `sbx_\w+\nsbx_\w+\n`,
			`paused\ntimeout\n`, `awake\n`,
			`sandbox.create\n`,
			`\d+(\.\d+)?\n[1-9]\d*\n`, `kept\n`,
			`42\n`, `event: number_of_executions\n(event: stdout\n)+event: end_of_execution\n`, `0\n`, `0\.047619047619047616\n`, `2\n`,
			`deleted\n`,
		})
	})

	t.Run("go", func(t *testing.T) {
		src := blocks(t, doc, "go")
		if len(src) != 1 {
			t.Fatalf("%d Go blocks in docs/sandboxes.md, want 1", len(src))
		}
		dir := t.TempDir()
		mod := "module docexample\n\ngo 1.24\n\nrequire github.com/corralhq/corral/sandbox v0.0.0\n\n" +
			"replace github.com/corralhq/corral/sandbox => " + filepath.Join(root, "sandbox") + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src[0]), 0o644); err != nil {
			t.Fatal(err)
		}
		build := exec.CommandContext(t.Context(), "go", "build", "-o", "example", ".")
		build.Dir = dir
		build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build the Go example: %v\n%s", err, out)
		}
		run := exec.CommandContext(t.Context(), filepath.Join(dir, "example"))
		run.Env = append(os.Environ(), s.Env()...)
		out, err := run.CombinedOutput()
		if err != nil {
			t.Fatalf("the Go example: %v\n%s", err, out)
		}
		inOrder(t, "Go example", string(out), []string{
			`created on the container tier\n`, `stdout: hello from a file\n`, `exit code 0\n`,
			`shell: 42 \(exit 0\)\n`, `cat: round trip\n`,
			`context stdout: thinking\n`, `context: 42\n`, `context error: NameError\n`, `listed: 1\n`,
			`paused: calls are refused until a resume\n`, `resumed with memory: false\n`,
		})
	})
}
