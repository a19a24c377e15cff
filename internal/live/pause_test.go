package live

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// pausedCalls checks that every call that needs live sandbox box running
// fails with ErrPaused (an execution with its session id: an input error
// that says so), while what this node holds of it stays readable.
func (u *unit) pausedCalls(pid int, cid string) {
	t := u.t
	t.Helper()
	ctx := t.Context()
	_, err := u.m.StartProcess(ctx, "t", "box", sandbox.StartProcessRequest{Cmd: []string{"true"}})
	checkPaused(t, "start a process", err)
	_, err = u.m.WriteStdin(ctx, "t", "box", pid, strings.NewReader("x\n"))
	checkPaused(t, "write stdin", err)
	checkPaused(t, "signal", u.m.Signal(ctx, "t", "box", pid, 15))
	checkPaused(t, "close stdin", u.m.CloseStdin("t", "box", pid))
	checkPaused(t, "read a file", u.m.ReadFile(ctx, "t", "box", "/workspace/kept.txt", &bytes.Buffer{}))
	_, err = u.m.WriteFile(ctx, "t", "box", "/workspace/new.txt", strings.NewReader("x"))
	checkPaused(t, "write a file", err)
	_, err = u.m.Contexts(ctx, "t", "box")
	checkPaused(t, "list contexts", err)
	if cid != "" {
		checkPaused(t, "run a cell", u.m.RunContext(ctx, "t", "box", cid, "1", time.Second, func(sandbox.ContextEvent) {}))
	}
	_, err = u.m.SetTimeout(ctx, "t", "box", time.Minute)
	checkPaused(t, "set the timeout", err)
	checkPaused(t, "pause again", u.m.Pause(ctx, "t", "box"))
	_, err = u.m.Acquirer("t", "box").Acquire(ctx, u.f.PythonClaim(u.t, runtime.TierContainer))
	var ie *validate.InputError
	if !errors.As(err, &ie) || ie.Field != "session_id" {
		t.Errorf("an execution in the paused sandbox: %v, want an input error on session_id", err)
	}
	if info, err := u.m.Sandbox("t", "box"); err != nil || info.State != "paused" || info.Pause == nil {
		t.Errorf("a paused sandbox's description: %+v, %v", info, err)
	}
	if _, err := u.m.Processes("t", "box"); err != nil {
		t.Errorf("list the processes of a paused sandbox: %v", err)
	}
}

func checkPaused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrPaused) {
		t.Errorf("%s in a paused sandbox: %v, want ErrPaused", what, err)
	}
}

// TestPauseMemory: a sandbox of a runtime that saves memory (the fake
// gVisor one, EnablePause) is paused and resumed with its files, its
// background process (same pid, still running, its stdin and output
// buffer working) and a context's variables; while paused its calls fail
// with ErrPaused and its timeout stops; a second resume is ErrNotPaused.
func TestPauseMemory(t *testing.T) {
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts run it in local mode)")
	u := newUnit(t)
	u.f.Runtimes[runtime.TierGVisor].EnablePause()
	ctx := t.Context()
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python", Tier: sandbox.IsolationGVisor, TimeoutSeconds: 60})
	if _, err := u.m.WriteFile(ctx, "t", "box", "/workspace/kept.txt", strings.NewReader("kept\n")); err != nil {
		t.Fatal(err)
	}
	cat := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true})
	if _, err := u.m.WriteStdin(ctx, "t", "box", cat.PID, strings.NewReader("before\n")); err != nil {
		t.Fatal(err)
	}
	u.until("box", cat.PID, 0, func(evs []sandbox.ProcessEvent) bool { return stdout(evs) == "before\n" })
	c, err := u.m.CreateContext(ctx, "t", "box", kernel.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	u.runCell(c.ID, "x = 21")

	u.clock.Advance(30 * time.Second)
	if err := u.m.Pause(ctx, "t", "box"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	info, err := u.m.Sandbox("t", "box")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != "paused" || info.Pause == nil || !info.Pause.Memory || !info.ExpiresAt.Equal(u.clock.Now().Add(DefaultPausedTTL)) {
		t.Errorf("paused: state %q, pause %+v, expires %v", info.State, info.Pause, info.ExpiresAt)
	}
	u.pausedCalls(cat.PID, c.ID)
	// Past its own timeout, but paused: the reaper keeps it.
	u.clock.Advance(time.Hour)
	u.table.Reap()
	if _, err := u.m.Sandbox("t", "box"); err != nil {
		t.Fatalf("a paused sandbox past its timeout: %v", err)
	}

	info, err = u.m.Resume(ctx, "t", "box")
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	want := sandbox.SandboxResume{Memory: true, Processes: 1, Contexts: 1, DurationMS: info.Resume.DurationMS}
	if info.State != "running" || info.Pause != nil || info.Resume == nil || *info.Resume != want {
		t.Errorf("resumed: state %q, pause %+v, resume %+v; want %+v", info.State, info.Pause, info.Resume, want)
	}
	if !info.ExpiresAt.Equal(u.clock.Now().Add(time.Minute)) {
		t.Errorf("resumed: expires %v, want its whole timeout from now (%v)", info.ExpiresAt, u.clock.Now().Add(time.Minute))
	}
	if _, err := u.m.Resume(ctx, "t", "box"); !errors.Is(err, ErrNotPaused) {
		t.Errorf("resume a running sandbox: %v, want ErrNotPaused", err)
	}
	if got := mainText(u.runCell(c.ID, "x * 2")); got != "42" {
		t.Errorf("x * 2 after the resume = %q, want 42", got)
	}
	procs, err := u.m.Processes("t", "box")
	if err != nil || len(procs) != 1 || procs[0].PID != cat.PID || !procs[0].Running {
		t.Errorf("processes after the resume: %+v, %v; want cat (pid %d) running", procs, err, cat.PID)
	}
	if _, err := u.m.WriteStdin(ctx, "t", "box", cat.PID, strings.NewReader("after\n")); err != nil {
		t.Fatalf("write stdin after the resume: %v", err)
	}
	u.until("box", cat.PID, 0, func(evs []sandbox.ProcessEvent) bool { return stdout(evs) == "before\nafter\n" })
	if err := u.m.CloseStdin("t", "box", cat.PID); err != nil {
		t.Fatal(err)
	}
	p, err := u.m.Process(ctx, "t", "box", cat.PID, true)
	if err != nil || p.Exit == nil || p.Exit.ExitCode != 0 || p.Exit.Error != "" {
		t.Errorf("cat's end after the resume: %+v, %v", p.Exit, err)
	}
	var b bytes.Buffer
	if err := u.m.ReadFile(ctx, "t", "box", "/workspace/kept.txt", &b); err != nil || b.String() != "kept\n" {
		t.Errorf("a file after the resume: %q, %v", b.String(), err)
	}
	if _, err := os.Stat(u.handle("box").pauseDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the saved state outlived the resume: %v", err)
	}
}

// TestPauseFiles: a sandbox whose runtime cannot save memory (runc's, the
// fake container tier) is paused with its files only: its processes end
// as sandbox_paused, its contexts go, and the resume says so and makes a
// sandbox on the same disk.
func TestPauseFiles(t *testing.T) {
	u := newUnit(t)
	ctx := t.Context()
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box", TimeoutSeconds: 60})
	if _, err := u.m.WriteFile(ctx, "t", "box", "/workspace/kept.txt", strings.NewReader("kept\n")); err != nil {
		t.Fatal(err)
	}
	cat := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true})
	old := u.heldSandbox("box")
	if err := u.m.Pause(ctx, "t", "box"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if u.f.Alive(old.ID()) {
		t.Error("the sandbox runs on after a pause of its files")
	}
	info, err := u.m.Sandbox("t", "box")
	if err != nil || info.State != "paused" || info.Pause == nil || info.Pause.Memory {
		t.Errorf("paused: %+v, %v", info, err)
	}
	p, err := u.m.Process(ctx, "t", "box", cat.PID, true)
	if err != nil || p.Exit == nil || p.Exit.Error != "sandbox_paused" {
		t.Errorf("a process of a sandbox paused with its files: %+v, %v; want exit error sandbox_paused", p.Exit, err)
	}
	u.pausedCalls(cat.PID, "")

	info, err = u.m.Resume(ctx, "t", "box")
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	want := sandbox.SandboxResume{ProcessesLost: 1, DurationMS: info.Resume.DurationMS}
	if info.State != "running" || info.Resume == nil || *info.Resume != want || info.Restarts != 0 {
		t.Errorf("resumed: %+v, resume %+v; want %+v", info, info.Resume, want)
	}
	var b bytes.Buffer
	if err := u.m.ReadFile(ctx, "t", "box", "/workspace/kept.txt", &b); err != nil || b.String() != "kept\n" {
		t.Errorf("a file after the resume: %q, %v", b.String(), err)
	}
	st := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"true"}})
	if p, err := u.m.Process(ctx, "t", "box", st.PID, true); err != nil || p.Exit == nil || p.Exit.ExitCode != 0 {
		t.Errorf("a process after the resume: %+v, %v", p, err)
	}
}

// TestPausedExpires: a paused sandbox is dropped after PausedTTL, leaving
// nothing.
func TestPausedExpires(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.PausedTTL = 2 * time.Hour })
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box", TimeoutSeconds: 60})
	if err := u.m.Pause(t.Context(), "t", "box"); err != nil {
		t.Fatal(err)
	}
	dir := u.handle("box").w.Dir()
	u.clock.Advance(time.Hour)
	u.table.Reap()
	if _, err := u.m.Sandbox("t", "box"); err != nil {
		t.Fatalf("paused an hour of two: %v", err)
	}
	u.clock.Advance(time.Hour + time.Second)
	u.table.Reap()
	if _, err := u.m.Sandbox("t", "box"); !errors.Is(err, ErrNotFound) {
		t.Errorf("past PausedTTL: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an expired paused sandbox left %s: %v", dir, err)
	}
	if _, err := u.m.Resume(t.Context(), "t", "box"); !errors.Is(err, ErrNotFound) {
		t.Errorf("resume an expired sandbox: %v, want ErrNotFound", err)
	}
}

// TestResumeAfterNodeRestart: a sandbox paused with its memory (the fake
// gVisor one) is resumed by the node started again on its directory, which
// holds nothing of it but the description beside the memory: its running
// process is listed again with its pid and stdin working (its output log
// starts at the resume: what it wrote before the pause is not kept), an
// ended one as it ended, its context with its variables. When the restore
// fails (the saved memory gone), the resume makes it on its disk and still
// lists the processes, the running one ended with the pause and counted
// lost.
func TestResumeAfterNodeRestart(t *testing.T) {
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts run it in local mode)")
	u := newUnit(t)
	u.f.Runtimes[runtime.TierGVisor].EnablePause()
	ctx := t.Context()
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python", Tier: sandbox.IsolationGVisor, TimeoutSeconds: 600})
	cat := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true, Tag: "cat"})
	if _, err := u.m.WriteStdin(ctx, "t", "box", cat.PID, strings.NewReader("before\n")); err != nil {
		t.Fatal(err)
	}
	u.until("box", cat.PID, 0, func(evs []sandbox.ProcessEvent) bool { return stdout(evs) == "before\n" })
	done := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"true"}})
	if p, err := u.m.Process(ctx, "t", "box", done.PID, true); err != nil || p.Exit == nil {
		t.Fatalf("true: %+v, %v", p, err)
	}
	c, err := u.m.CreateContext(ctx, "t", "box", kernel.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	u.runCell(c.ID, "x = 21")
	wantProcs, err := u.m.Processes("t", "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := u.m.Pause(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	u.restart()

	info, err := u.m.Resume(ctx, "t", "box")
	if err != nil {
		t.Fatalf("resume after the restart: %v", err)
	}
	want := sandbox.SandboxResume{Memory: true, Processes: 1, Contexts: 1, DurationMS: info.Resume.DurationMS}
	if *info.Resume != want {
		t.Errorf("resume after the restart: %+v, want %+v", info.Resume, want)
	}
	procs, err := u.m.Processes("t", "box")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantProcs, procs); diff != "" {
		t.Errorf("processes after the restart (-before +after):\n%s", diff)
	}
	if _, err := u.m.WriteStdin(ctx, "t", "box", cat.PID, strings.NewReader("after\n")); err != nil {
		t.Fatalf("write stdin after the restart: %v", err)
	}
	u.until("box", cat.PID, 0, func(evs []sandbox.ProcessEvent) bool { return stdout(evs) == "after\n" })
	if got := mainText(u.runCell(c.ID, "x * 2")); got != "42" {
		t.Errorf("x * 2 after the restart = %q, want 42", got)
	}

	// Again, and the saved memory is gone when the node comes back.
	if err := u.m.Pause(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	dir := u.handle("box").pauseDir()
	u.restart()
	if err := os.Remove(filepath.Join(dir, "fake-paused.json")); err != nil {
		t.Fatal(err)
	}
	info, err = u.m.Resume(ctx, "t", "box")
	if err != nil {
		t.Fatalf("resume without the saved memory: %v", err)
	}
	want = sandbox.SandboxResume{ProcessesLost: 1, DurationMS: info.Resume.DurationMS}
	if *info.Resume != want {
		t.Errorf("resume without the saved memory: %+v, want %+v", info.Resume, want)
	}
	p, err := u.m.Process(ctx, "t", "box", cat.PID, false)
	if err != nil || p.Running || p.Exit == nil || p.Exit.Error != exitPaused {
		t.Errorf("cat after a resume without the saved memory: %+v, %v; want ended as %s", p, err, exitPaused)
	}
	if p, err := u.m.Process(ctx, "t", "box", done.PID, false); err != nil || p.Exit == nil || p.Exit.ExitCode != 0 {
		t.Errorf("true after a resume without the saved memory: %+v, %v", p, err)
	}
	if cs, err := u.m.Contexts(ctx, "t", "box"); err != nil || len(cs) != 0 {
		t.Errorf("contexts after a resume without the saved memory: %+v, %v; want none", cs, err)
	}
}
