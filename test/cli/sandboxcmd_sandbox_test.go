package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestSandboxCLI drives a live sandbox on runc through corral sandbox:
// create with metadata, list by it, exec with output and exit codes, a
// background process listed by ps, files, timeout and kill.
func TestSandboxCLI(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	project := fmt.Sprintf("cli-%d", time.Now().UnixNano())

	r := corral(t, srv, "", "sandbox", "create", "--lang", "python", "--isolation", "container",
		"--timeout", "5m", "--memory", "256", "--metadata", "project="+project, "--metadata", "role=a")
	id := strings.TrimSpace(r.stdout)
	if r.status != 0 || id == "" || strings.Contains(id, "\n") {
		t.Fatalf("create: %+v", r)
	}
	t.Cleanup(func() { corral(t, srv, "", "sandbox", "kill", id) })
	r = corral(t, srv, "", "sandbox", "create", "--json", "--isolation", "container", "--metadata", "project="+project)
	var other sandbox.Info
	if err := json.Unmarshal([]byte(r.stdout), &other); err != nil || r.status != 0 || other.SandboxID == "" ||
		other.Tier != "container" || other.Metadata["project"] != project {
		t.Fatalf("create --json: %+v (%v)", r, err)
	}

	// list: both by project, one by role; the table names the labels.
	list := func(args ...string) []sandbox.Info {
		t.Helper()
		r := corral(t, srv, "", append([]string{"sandbox", "list", "--json"}, args...)...)
		var l sandbox.SandboxList
		if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || r.status != 0 {
			t.Fatalf("list %v: %+v (%v)", args, r, err)
		}
		return l.Sandboxes
	}
	if l := list("--metadata", "project="+project); len(l) != 2 {
		t.Errorf("list by project: %+v", l)
	}
	if l := list("--metadata", "project="+project, "--metadata", "role=a"); len(l) != 1 || l[0].SandboxID != id ||
		l[0].Language != "python" || l[0].Limits.MemoryMB != 256 {
		t.Errorf("list by project and role: %+v", l)
	}
	r = corral(t, srv, "", "sandbox", "list", "--metadata", "role=a", "--metadata", "project="+project)
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); r.status != 0 || len(lines) != 2 ||
		!strings.HasPrefix(lines[0], "SANDBOX") || !strings.HasPrefix(lines[1], id+" ") ||
		!strings.Contains(lines[1], "project="+project+",role=a") {
		t.Errorf("list table: %+v", r)
	}

	// exec: output on the right streams, the process's exit code.
	r = corral(t, srv, "", "sandbox", "exec", id, "--", "python3", "-c",
		"import sys; print('out'); print('err', file=sys.stderr); sys.exit(5)")
	if r.status != 5 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("exec argv: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "exec", id, "--shell", "echo $((6 * 7)) > answer; cat answer")
	if r.status != 0 || r.stdout != "42\n" {
		t.Errorf("exec --shell: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "exec", id, "--shell", "kill -TERM $$")
	if r.status != 128+15 {
		t.Errorf("exec killed by SIGTERM: %+v", r)
	}
	r = corral(t, srv, "piped in\n", "sandbox", "exec", "--stdin", id, "--", "cat")
	if r.status != 0 || r.stdout != "piped in\n" {
		t.Errorf("exec --stdin: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "exec", id, "--", "no-such-program")
	if r.status == 0 {
		t.Errorf("exec of a missing program: %+v", r)
	}

	// --background: the pid at once; ps lists it running, with its tag.
	r = corral(t, srv, "", "sandbox", "exec", "--background", "--tag", "sleeper", id, "--", "sleep", "300")
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if r.status != 0 || err != nil || pid <= 0 {
		t.Fatalf("exec --background: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "ps", "--json", id)
	var procs sandbox.ProcessList
	if err := json.Unmarshal([]byte(r.stdout), &procs); err != nil || r.status != 0 {
		t.Fatalf("ps --json: %+v (%v)", r, err)
	}
	found := false
	for _, p := range procs.Processes {
		if p.PID == pid {
			found = p.Running && p.Tag == "sleeper" && strings.Join(p.Cmd, " ") == "sleep 300"
		}
	}
	if !found {
		t.Errorf("ps lacks the running sleeper %d: %+v", pid, procs.Processes)
	}
	r = corral(t, srv, "", "sandbox", "ps", id)
	rows := map[string][]string{}
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			rows[f[0]] = f
		}
	}
	if f := rows[strconv.Itoa(pid)]; len(f) < 3 || f[1] != "running" || f[2] != "sleeper" ||
		!strings.HasPrefix(r.stdout, "PID ") || !strings.Contains(r.stdout, "exit 143 (SIGTERM)") {
		t.Errorf("ps table:\n%s", r.stdout)
	}

	// Ctrl-C: the CLI exits 130 and the process gets SIGTERM. CORRAL_SHELL
	// in the environment is not read (the command would be refused).
	cmd := exec.Command(testenv.Corral(t), "sandbox", "exec", "--tag", "interrupted", id, "--", "sleep", "300")
	cmd.Env = append(append(os.Environ(), srv.Env()...), "CORRAL_SHELL=echo from the environment")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	interrupted := 0
	for deadline := time.Now().Add(30 * time.Second); interrupted == 0; {
		r := corral(t, srv, "", "sandbox", "ps", "--json", id)
		var l sandbox.ProcessList
		json.Unmarshal([]byte(r.stdout), &l)
		for _, p := range l.Processes {
			if p.Tag == "interrupted" && p.Running {
				interrupted = p.PID
			}
		}
		if interrupted == 0 && time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("the interrupted exec never ran: %s %s", r.stdout, stderr.String())
		}
	}
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 130 {
		t.Errorf("interrupted exec: %v, %s", err, stderr.String())
	}
	sdk := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if exit, err := sdk.Sandbox(id).Process(interrupted).Wait(ctx); err != nil || exit.Signal != "SIGTERM" {
		t.Errorf("the interrupted process: %+v, %v; want ended by SIGTERM", exit, err)
	}

	// run: a new context says its id; the next run in it sees x; a second
	// context does not; an error exits 1 with its traceback; code from stdin.
	r = corral(t, srv, "", "sandbox", "run", id, "x = 21\nprint('set')")
	cid, ok := strings.CutPrefix(strings.TrimSpace(r.stderr), "context: ")
	if r.status != 0 || r.stdout != "set\n" || !ok || cid == "" {
		t.Fatalf("run in a new context: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "run", id, "--context", cid, "x * 2")
	if r.status != 0 || r.stdout != "42\n" || r.stderr != "" {
		t.Errorf("run x * 2 in the context: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "run", id, "x")
	if r.status != 1 || !strings.Contains(r.stderr, "NameError") || r.stdout != "" {
		t.Errorf("x in a second context: %+v", r)
	}
	r = corral(t, srv, "y = x + 1\ny\n", "sandbox", "run", "--json", id, "--context", cid, "-")
	var cell sandbox.ContextEventList
	if err := json.Unmarshal([]byte(r.stdout), &cell); err != nil || r.status != 0 {
		t.Fatalf("run --json from stdin: %+v (%v)", r, err)
	}
	var ex sandbox.Execution
	for _, ev := range cell.Events {
		ex.Add(ev)
	}
	if ex.Text() != "22" || ex.ExecutionCount != 3 {
		t.Errorf("run --json: text %q after %d cells, want 22 after 3: %+v", ex.Text(), ex.ExecutionCount, cell)
	}

	// files: put from stdin, ls, cat, rm; a path outside is refused.
	r = corral(t, srv, "line one\n", "sandbox", "files", id, "put", "-", "data/in.txt")
	if r.status != 0 || r.stdout != "/workspace/data/in.txt (9 bytes)\n" {
		t.Errorf("files put: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "files", id, "ls", "data")
	if r.status != 0 || !strings.HasPrefix(r.stdout, "file  9 ") || !strings.HasSuffix(r.stdout, " /workspace/data/in.txt\n") {
		t.Errorf("files ls: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "files", id, "cat", "/workspace/data/in.txt")
	if r.status != 0 || r.stdout != "line one\n" {
		t.Errorf("files cat: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "files", id, "rm", "data/in.txt")
	if r.status != 0 {
		t.Errorf("files rm: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "files", id, "cat", "data/in.txt")
	if r.status != 4 || !strings.Contains(r.stderr, "404") {
		t.Errorf("cat after rm: %+v", r)
	}
	r = corral(t, srv, "", "sandbox", "files", id, "cat", "/proc/self/environ")
	if r.status != 4 || r.stdout != "" {
		t.Errorf("cat of the kernel's: %+v", r)
	}
	// The rest of the sandbox's file system is its own, to read (and,
	// as root, to write).
	r = corral(t, srv, "", "sandbox", "files", id, "cat", "/etc/passwd")
	if r.status != 0 || !strings.Contains(r.stdout, "user:x:1000:1000:user:/home/user:") {
		t.Errorf("cat /etc/passwd: %+v", r)
	}

	// timeout, then kill: the sandbox is gone from the list and its id 404s.
	r = corral(t, srv, "", "sandbox", "timeout", "--json", id, "10m")
	var info sandbox.Info
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.status != 0 ||
		time.Until(info.ExpiresAt) < 9*time.Minute || time.Until(info.ExpiresAt) > 11*time.Minute {
		t.Errorf("timeout 10m: %+v (%v)", r, err)
	}
	r = corral(t, srv, "", "sandbox", "kill", id, other.SandboxID)
	if r.status != 0 || r.stdout != id+": killed\n"+other.SandboxID+": killed\n" {
		t.Errorf("kill: %+v", r)
	}
	if l := list("--metadata", "project="+project); len(l) != 0 {
		t.Errorf("list after kill: %+v", l)
	}
	r = corral(t, srv, "", "sandbox", "exec", id, "--", "true")
	if r.status != 4 || !strings.Contains(r.stderr, "404") {
		t.Errorf("exec in a killed sandbox: %+v", r)
	}
}

// TestSandboxCLIUsage checks the help and the refusals that need no sandbox.
func TestSandboxCLIUsage(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	r := corral(t, srv, "", "sandbox", "--help")
	for _, c := range []string{"create", "list", "kill", "timeout", "exec", "ps", "files"} {
		if r.status != 0 || !strings.Contains(r.stderr, "\n  "+c+" ") {
			t.Errorf("sandbox --help lacks %s: %+v", c, r)
		}
	}
	r = corral(t, srv, "", "--help")
	if !strings.Contains(r.stderr, "\n  sandbox ") {
		t.Errorf("corral --help lacks sandbox:\n%s", r.stderr)
	}
	r = corral(t, srv, "", "sandbox", "exec", "-h")
	for _, s := range []string{"usage: corral sandbox exec [flags] ID", "-background", "-shell", "exit status is the process's"} {
		if r.status != 0 || !strings.Contains(r.stderr, s) {
			t.Errorf("exec -h lacks %q: %+v", s, r)
		}
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"sandbox"}, "usage: corral sandbox"},
		{[]string{"sandbox", "nope"}, "unknown command \"nope\""},
		{[]string{"sandbox", "exec", "sb_x"}, "give a command"},
		{[]string{"sandbox", "exec", "sb_x", "--shell", "true", "--", "true"}, "give a command"},
		{[]string{"sandbox", "create", "--metadata", "novalue"}, "not key=value"},
		{[]string{"sandbox", "timeout", "sb_x", "soon"}, "not a duration"},
		{[]string{"sandbox", "files", "sb_x", "chmod", "x"}, "usage: corral sandbox files"},
		{[]string{"sandbox", "kill", "no-such-sandbox"}, "404"},
	} {
		r := corral(t, srv, "", c.args...)
		if r.status != 4 || !strings.Contains(r.stderr, c.msg) {
			t.Errorf("%v: %+v; want 4 and %q", c.args, r, c.msg)
		}
	}
}

// TestSandboxCLIDoc runs the bash block of docs/sandboxes.md with corral
// on PATH and checks its output, in order.
func TestSandboxCLIDoc(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "sandboxes.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```bash\n(.*?)```").FindAllSubmatch(b, -1)
	if len(m) != 1 {
		t.Fatalf("%d bash blocks in docs/sandboxes.md, want 1", len(m))
	}
	cmd := exec.CommandContext(t.Context(), "bash", "-c", "set -euo pipefail\n"+string(m[0][1]))
	cmd.Dir = t.TempDir() // the example writes a file
	cmd.Env = append(os.Environ(), srv.Env()...)
	cmd.Env = append(cmd.Env, "PATH="+filepath.Dir(testenv.Corral(t))+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the CLI example: %v\n%s", err, out)
	}
	rest := string(out)
	for _, p := range []string{
		`SANDBOX +LANGUAGE +TIER +STATE +EXPIRES +METADATA\n(sbx_\w+) +python +container +running .* project=cli-demo\n`,
		`^42\noops\nexit 3\n`,
		`PID +STATE +TAG +STARTED +CMD\n`, `\d+ +running +web .* python3 -m http.server 8000\n`,
		`/v1/sandboxes/sbx_\w+/ports/8000/\n`, `^200\n`,
		`/workspace/data/in.csv \(4 bytes\)\n`, `file +4 .* /workspace/data/in.csv\n`, `a,b\n`,
		`sbx_\w+: expires .*\n`, `^42\n`, `sbx_\w+: paused with its files only.*\n`,
		`sbx_\w+: resumed with its files only; lost 1 process\(es\) and its code contexts\n`, `sbx_\w+: killed\n$`,
	} {
		loc := regexp.MustCompile(p).FindStringIndex(rest)
		if loc == nil {
			t.Fatalf("the CLI example's output lacks %q (in order):\n%s", p, out)
		}
		rest = rest[loc[1]:]
	}
}
