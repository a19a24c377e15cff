// Package cli runs the remote commands of the corral binary (exec, submit,
// get, cancel, logs, ls) against a real corral serve.
package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type result struct {
	stdout, stderr string
	status         int
}

// corral runs the binary with the server's endpoint and key in the
// environment and stdin as the code.
func corral(t *testing.T, srv *testserver.Server, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(testenv.Corral(t), args...)
	cmd.Env = append(os.Environ(), srv.Env()...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.status = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("corral %v: %v", args, err)
	}
	return r
}

func TestRemoteCLI(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	for _, c := range []struct {
		name string
		f    func(*testing.T, *testserver.Server)
	}{
		{"ExecVerdicts", testExecVerdicts},
		{"ExecJSON", testExecJSON},
		{"ExecErrors", testExecErrors},
		{"SubmitLogsGet", testSubmitLogsGet},
		{"Cancel", testCancel},
		{"Ls", testLs},
	} {
		t.Run(c.name, func(t *testing.T) { c.f(t, srv) })
	}
}

// corral exec - with python on stdin prints the program's output and exits
// with a status that mirrors the verdict.
func testExecVerdicts(t *testing.T, srv *testserver.Server) {
	for _, c := range []struct {
		code   string
		args   []string
		status int
		stdout string
		note   string
	}{
		{"print(sum(range(100)))", nil, 0, "4950\n", "corral: success · exit 0"},
		{"import sys; print('partial'); sys.exit(3)", nil, 1, "partial\n", "corral: runtime_error · exit 3"},
		{"print(", nil, 2, "", "corral: compile_error"},
		{"while True: pass", []string{"--timeout", "1s"}, 124, "", "corral: timeout"},
		{"x = bytearray(1 << 30)", []string{"--memory", "64"}, 137, "", "corral: oom"},
	} {
		args := append([]string{"exec", "--lang", "python"}, c.args...)
		r := corral(t, srv, c.code, append(args, "-")...)
		if r.status != c.status || r.stdout != c.stdout || !strings.Contains(r.stderr, c.note) {
			t.Errorf("%q: status %d stdout %q stderr %q; want %d %q %q", c.code, r.status, r.stdout, r.stderr, c.status, c.stdout, c.note)
		}
	}
	// The language comes from the file extension too.
	f := t.TempDir() + "/hello.sh"
	os.WriteFile(f, []byte("echo from a file; echo to stderr >&2"), 0o644)
	r := corral(t, srv, "", "exec", f)
	if r.status != 0 || r.stdout != "from a file\n" || !strings.HasPrefix(r.stderr, "to stderr\n") {
		t.Errorf("exec FILE: %+v", r)
	}
}

func testExecJSON(t *testing.T, srv *testserver.Server) {
	id := sandbox.NewExecutionID()
	r := corral(t, srv, "raise SystemExit(5)", "exec", "--json", "--id", id, "--lang", "python", "--memory", "128", "-")
	var rec sandbox.Result
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if r.status != 1 || rec.ExecutionID != id || rec.Status != sandbox.StatusFailed || rec.Error == nil ||
		rec.Error.Type != sandbox.ErrRuntime || rec.ExitCode == nil || *rec.ExitCode != 5 || rec.Limits.MemoryMB != 128 {
		t.Errorf("status %d record %+v", r.status, rec)
	}
}

func testExecErrors(t *testing.T, srv *testserver.Server) {
	r := corral(t, srv, "x", "exec", "--lang", "cobol", "-")
	if r.status != 4 || !strings.Contains(r.stderr, "language") {
		t.Errorf("unknown language: %+v", r)
	}
	r = corral(t, srv, "print(1)", "exec", "--lang", "python", "--api-key", "wrong", "-")
	if r.status != 4 || !strings.Contains(r.stderr, "401 unauthorized") {
		t.Errorf("wrong key: %+v", r)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	r = corral(t, srv, "print(1)", "exec", "--lang", "python", "--endpoint", dead, "-")
	if r.status != 70 || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("no server: %+v", r)
	}
	r = corral(t, srv, "", "exec", "--lang", "python")
	if r.status != 4 {
		t.Errorf("no file: %+v", r)
	}
}

func testSubmitLogsGet(t *testing.T, srv *testserver.Server) {
	code := "import sys, time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)\nprint('warn', file=sys.stderr)\nsys.exit(7)\n"
	r := corral(t, srv, code, "submit", "--lang", "python", "-")
	id := strings.TrimSpace(r.stdout)
	if r.status != 0 || !strings.HasPrefix(id, "ex_") {
		t.Fatalf("submit: %+v", r)
	}
	r = corral(t, srv, "", "logs", id)
	if r.status != 1 || r.stdout != "tick 0\ntick 1\ntick 2\n" || !strings.HasPrefix(r.stderr, "warn\n") ||
		!strings.Contains(r.stderr, "corral: runtime_error · exit 7") {
		t.Errorf("logs: %+v", r)
	}
	r = corral(t, srv, "", "logs", "--json", id)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var last struct {
		Type   string
		Result *sandbox.Result
	}
	json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if r.status != 1 || last.Type != "done" || last.Result == nil || last.Result.ExecutionID != id {
		t.Errorf("logs --json: %+v", r)
	}
	r = corral(t, srv, "", "get", id)
	for _, s := range []string{"execution  " + id, "status     failed (runtime_error)", "exit code  7",
		"--- stdout (21 bytes, 3 lines)\ntick 0\ntick 1\ntick 2\n", "--- stderr (5 bytes, 1 lines)\nwarn\n"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("get lacks %q:\n%s", s, r.stdout)
		}
	}
	if r.status != 0 {
		t.Errorf("get exit %d", r.status)
	}
	r = corral(t, srv, "", "get", "--wait", "--json", id)
	var rec sandbox.Result
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || r.status != 1 || rec.Stdout != "tick 0\ntick 1\ntick 2\n" {
		t.Errorf("get --wait --json: %+v (%v)", r, err)
	}
	r = corral(t, srv, "", "get", "no-such-id")
	if r.status != 4 || !strings.Contains(r.stderr, "404 not_found") {
		t.Errorf("get unknown: %+v", r)
	}
}

func testCancel(t *testing.T, srv *testserver.Server) {
	r := corral(t, srv, "echo started; sleep 60", "submit", "--lang", "bash", "-")
	id := strings.TrimSpace(r.stdout)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r = corral(t, srv, "", "get", "--json", id)
		var rec sandbox.Result
		json.Unmarshal([]byte(r.stdout), &rec)
		if rec.Status == sandbox.StatusRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never ran: %+v", rec)
		}
		time.Sleep(100 * time.Millisecond)
	}
	r = corral(t, srv, "", "cancel", id)
	if r.status != 0 || r.stdout != id+": cancelled\n" {
		t.Errorf("cancel: %+v", r)
	}
	r = corral(t, srv, "", "get", "--wait", id)
	if r.status != 130 || !strings.Contains(r.stdout, "status     cancelled (cancelled)") {
		t.Errorf("after cancel: %+v", r)
	}
	r = corral(t, srv, "", "cancel", "--json", id)
	var rec sandbox.Result
	if err := json.Unmarshal([]byte(r.stdout), &rec); err != nil || rec.Status != sandbox.StatusCancelled {
		t.Errorf("cancel --json: %+v", r)
	}
}

func testLs(t *testing.T, srv *testserver.Server) {
	session := fmt.Sprintf("cli-%d", time.Now().UnixNano())
	for _, code := range []string{"echo one", "exit 3", "sleep 0.4"} {
		corral(t, srv, code, "exec", "--lang", "bash", "--session", session, "-")
	}
	list := func(args ...string) sandbox.Page {
		t.Helper()
		r := corral(t, srv, "", append([]string{"ls", "--json", "--session", session}, args...)...)
		var p sandbox.Page
		if err := json.Unmarshal([]byte(r.stdout), &p); err != nil || r.status != 0 {
			t.Fatalf("ls %v: %+v (%v)", args, r, err)
		}
		return p
	}
	if p := list(); len(p.Executions) != 3 || p.Executions[0].Stdout != "" {
		t.Errorf("ls: %d executions", len(p.Executions))
	}
	if p := list("--exit-code-ne", "0"); len(p.Executions) != 1 || p.Executions[0].ExitCode == nil || *p.Executions[0].ExitCode != 3 {
		t.Errorf("--exit-code-ne 0: %+v", p.Executions)
	}
	if p := list("--status", "failed", "--error-type", "runtime_error", "--lang", "bash", "--since", "1h"); len(p.Executions) != 1 {
		t.Errorf("filters: %+v", p.Executions)
	}
	if p := list("--sort", "-duration_ms", "--limit", "1"); len(p.Executions) != 1 || p.NextCursor == "" {
		t.Errorf("--limit 1: %+v", p)
	}
	if p := list("--limit", "1", "--all"); len(p.Executions) != 3 || p.NextCursor != "" {
		t.Errorf("--all: %d executions", len(p.Executions))
	}
	r := corral(t, srv, "", "ls", "--session", session)
	if r.status != 0 || !strings.HasPrefix(r.stdout, "EXECUTION") || strings.Count(r.stdout, "\n") != 4 ||
		!strings.Contains(r.stdout, "runtime_error") {
		t.Errorf("ls table:\n%s", r.stdout)
	}
	r = corral(t, srv, "", "ls", "--status", "done")
	if r.status != 4 || !strings.Contains(r.stderr, "(status)") {
		t.Errorf("bad status: %+v", r)
	}
}
