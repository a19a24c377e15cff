package sandboxes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// TestPause: a live sandbox paused and resumed through a real server, over
// the Go SDK, on both tiers. Its files survive on both. On gVisor its
// memory does: a context's x = 21 gives x * 2 = 42 after the resume, a
// background process started before the pause is listed and running
// after (same pid; its stdin and output go on), and egress through the
// sandbox's allowlist works again. On runc the process ends with the pause
// (sandbox_paused), the context is gone, and the resume says so. While
// paused, calls that need the sandbox answer 409 sandbox_paused and an
// execution in it fails as input_error; a second pause is 409 too, a
// resume of a running sandbox 409 not_paused.
func TestPause(t *testing.T) {
	testenv.RequireRoot(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hi") }))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	s := testserver.Start(t, testserver.Options{NoPool: true, Config: fmt.Sprintf(`
[network]
allow = ["*.test"]
ports = [%s]
[network.resolve]
"allowed.test" = "127.0.0.1"
`, port)})
	for _, tier := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		t.Run(string(tier), func(t *testing.T) { testPause(t, s, tier, port) })
	}
}

func testPause(t *testing.T, s *testserver.Server, tier sandbox.Isolation, port string) {
	c := client(s)
	ctx := t.Context()
	memory := tier == sandbox.IsolationGVisor
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: tier, TimeoutSeconds: 600,
		Network: &sandbox.Network{Allow: []string{"allowed.test"}}, Env: map[string]string{"UPSTREAM_PORT": port}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	if _, err := sb.Files().Write(ctx, "fetch.py", strings.NewReader(fetch)); err != nil {
		t.Fatal(err)
	}
	cat, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true, Tag: "cat"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.WriteStdin(ctx, strings.NewReader("before\n")); err != nil {
		t.Fatal(err)
	}
	awaitStdout(t, cat, "before\n")
	cx, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.RunCode(ctx, cx.ID, "x = 21", sandbox.RunCodeOptions{Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	paused, err := sb.Pause(ctx)
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	pauseTook := time.Since(start)
	if paused.State != "paused" || paused.Pause == nil || paused.Pause.Memory != memory {
		t.Fatalf("paused: state %q, pause %+v; want memory %v", paused.State, paused.Pause, memory)
	}
	if !paused.ExpiresAt.After(time.Now().Add(24 * time.Hour)) {
		t.Errorf("a paused sandbox expires at %v: its timeout should stop while paused", paused.ExpiresAt)
	}

	// Paused: what needs the sandbox is refused.
	if _, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"true"}}); !errors.Is(err, sandbox.ErrSandboxPaused) {
		t.Errorf("start a process while paused: %v, want ErrSandboxPaused", err)
	}
	if err := sb.Files().Read(ctx, "fetch.py", &bytes.Buffer{}); !errors.Is(err, sandbox.ErrSandboxPaused) {
		t.Errorf("read a file while paused: %v, want ErrSandboxPaused", err)
	}
	if _, err := sb.RunCode(ctx, cx.ID, "x", sandbox.RunCodeOptions{}); !errors.Is(err, sandbox.ErrSandboxPaused) {
		t.Errorf("run a cell while paused: %v, want ErrSandboxPaused", err)
	}
	if err := cat.WriteStdin(ctx, strings.NewReader("lost\n")); !errors.Is(err, sandbox.ErrSandboxPaused) {
		t.Errorf("write stdin while paused: %v, want ErrSandboxPaused", err)
	}
	if _, err := sb.Pause(ctx); !errors.Is(err, sandbox.ErrSandboxPaused) {
		t.Errorf("pause again: %v, want ErrSandboxPaused", err)
	}
	res, err := c.Execute(ctx, sandbox.ExecuteRequest{SessionID: sb.ID, Language: "python", Code: "print(1)"})
	var ee *sandbox.Error
	if !errors.As(err, &ee) || ee.Type != sandbox.ErrInput || !strings.Contains(ee.Message, "paused") {
		t.Errorf("an execution in the paused sandbox: %+v, %v; want an input_error that says it is paused", res, err)
	}
	if info, err := sb.Info(ctx); err != nil || info.State != "paused" {
		t.Errorf("get while paused: %+v, %v", info, err)
	}
	if procs, err := sb.Processes(ctx); err != nil || len(procs) != 1 || procs[0].Running != memory {
		t.Errorf("processes while paused: %+v, %v; want cat, running: %v", procs, err, memory)
	}

	start = time.Now()
	resumed, err := sb.Resume(ctx)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	resumeTook := time.Since(start)
	t.Logf("%s: pause %v (server %d ms, image %.1f MiB, memory %v), resume %v (server %+v)", tier,
		pauseTook.Round(time.Millisecond), paused.Pause.DurationMS, float64(paused.Pause.ImageBytes)/(1<<20), memory,
		resumeTook.Round(time.Millisecond), *resumed.Resume)
	want := sandbox.SandboxResume{Memory: true, Processes: 1, Contexts: 1}
	if !memory {
		want = sandbox.SandboxResume{ProcessesLost: 1}
	}
	want.DurationMS = resumed.Resume.DurationMS
	if resumed.State != "running" || *resumed.Resume != want {
		t.Errorf("resumed: state %q, %+v; want %+v", resumed.State, *resumed.Resume, want)
	}
	if _, err := sb.Resume(ctx); !errors.Is(err, sandbox.ErrNotPaused) {
		t.Errorf("resume a running sandbox: %v, want ErrNotPaused", err)
	}

	// Before any new process: on runc a new sandbox's pids start again,
	// and a new process may take cat's pid (and its place in the list).
	procs, err := sb.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var catNow *sandbox.ProcessInfo
	for i := range procs {
		if procs[i].PID == cat.PID {
			catNow = &procs[i]
		}
	}
	var b bytes.Buffer
	if err := sb.Files().Read(ctx, "fetch.py", &b); err != nil || b.String() != fetch {
		t.Errorf("a file after the resume: %v (%d bytes)", err, b.Len())
	}
	out, errOut, _, err := sb.Run(ctx, sandbox.StartProcessRequest{Cmd: []string{"python3", "fetch.py"}})
	if err != nil || !strings.HasPrefix(string(out), "allowed: ok hi\n") {
		t.Errorf("egress after the resume: %q %q %v", out, errOut, err)
	}
	ex, err := sb.RunCode(ctx, cx.ID, "x * 2", sandbox.RunCodeOptions{Timeout: time.Minute})
	if memory {
		if err != nil || ex.Text() != "42" {
			t.Errorf("x * 2 after the resume: %+v, %v; want 42", ex, err)
		}
		if catNow == nil || !catNow.Running || catNow.Tag != "cat" {
			t.Fatalf("the background process after the resume: %+v; want cat (pid %d) running", procs, cat.PID)
		}
		if err := cat.WriteStdin(ctx, strings.NewReader("after\n")); err != nil {
			t.Fatal(err)
		}
		awaitStdout(t, cat, "before\nafter\n")
		if err := cat.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		if end, err := cat.Wait(ctx); err != nil || end.ExitCode != 0 || end.Error != "" {
			t.Errorf("cat's end after the resume: %+v, %v", end, err)
		}
		return
	}
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the context after a resume of the files only: %+v, %v; want ErrNotFound", ex, err)
	}
	if catNow == nil || catNow.Tag != "cat" || catNow.Running || catNow.Exit == nil || catNow.Exit.Error != "sandbox_paused" {
		t.Errorf("the background process after a pause of the files only: %+v; want it ended as sandbox_paused", catNow)
	}
}

// awaitStdout reads p's events until its stdout is want.
func awaitStdout(t *testing.T, p *sandbox.Process, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var got []byte
	for ev, err := range p.Events(ctx, 0) {
		if err != nil {
			t.Fatalf("events: %v (stdout %q, want %q)", err, got, want)
		}
		if ev.Type == sandbox.ProcessEventStdout {
			got = append(got, ev.Data...)
			if string(got) == want {
				return
			}
		}
	}
	t.Fatalf("process %d ended with stdout %q, want %q", p.PID, got, want)
}

// TestPauseFromPool: a gVisor sandbox taken from the warm pool (its disk
// moved to be the sandbox's own) is paused with its memory too, and
// resumed with its context's variables.
func TestPauseFromPool(t *testing.T) {
	testenv.RequireRoot(t)
	s := testserver.Start(t, testserver.Options{Config: `
[[pool.warm]]
tier = "gvisor"
language = "python"
min_idle = 1
max_idle = 1
system = true
`})
	c := client(s)
	ctx := t.Context()
	if !testenv.Eventually(t, 2*time.Minute, func() bool { idle, _ := poolStats(t, s); return idle > 0 }) {
		t.Fatal("the warm pool never filled")
	}
	_, before := poolStats(t, s)
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Language: "python", Tier: sandbox.IsolationGVisor, TimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Kill(context.Background())
	if _, after := poolStats(t, s); after != before+1 {
		t.Fatalf("pool hits %d → %d: the sandbox was not taken from the pool", before, after)
	}
	cx, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.RunCode(ctx, cx.ID, "x = 21", sandbox.RunCodeOptions{Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	paused, err := sb.Pause(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if paused.Pause == nil || !paused.Pause.Memory {
		t.Errorf("a pooled gVisor sandbox paused without its memory: %+v", paused.Pause)
	}
	resumed, err := sb.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !resumed.Resume.Memory || resumed.Resume.Contexts != 1 {
		t.Errorf("resumed: %+v", *resumed.Resume)
	}
	if ex, err := sb.RunCode(ctx, cx.ID, "x * 2", sandbox.RunCodeOptions{Timeout: time.Minute}); err != nil || ex.Text() != "42" {
		t.Errorf("x * 2 after the resume: %+v, %v; want 42", ex, err)
	}
}
