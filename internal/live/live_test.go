package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// create makes live sandbox req.SandboxID of tenant t on the container tier.
func (u *unit) create(req sandbox.CreateSandboxRequest) sandbox.Info {
	u.t.Helper()
	if req.Tier == "" {
		req.Tier = sandbox.IsolationContainer
	}
	info, err := u.m.Create(u.t.Context(), "t", req)
	if err != nil {
		u.t.Fatal(err)
	}
	return info
}

// heldSandbox is the sandbox live sandbox id holds now.
func (u *unit) heldSandbox(id string) runtime.Sandbox {
	u.t.Helper()
	s := u.handle(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb
}

// start starts a process in live sandbox id.
func (u *unit) start(id string, req sandbox.StartProcessRequest) sandbox.ProcessInfo {
	u.t.Helper()
	p, err := u.m.StartProcess(u.t.Context(), "t", id, req)
	if err != nil {
		u.t.Fatal(err)
	}
	return p
}

// until reads a process's events from after until done says it has what
// it waits for (or the process ends), and returns them.
func (u *unit) until(id string, pid int, after uint64, done func([]sandbox.ProcessEvent) bool) []sandbox.ProcessEvent {
	u.t.Helper()
	out, err := u.m.ProcessOutput("t", id, pid)
	if err != nil {
		u.t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for {
		evs, changed, ended := out.Events(after)
		if done(evs) || ended {
			return evs
		}
		select {
		case <-changed:
		case <-deadline:
			u.t.Fatalf("process %d: still waiting after 30 s; events %+v", pid, evs)
		}
	}
}

func stdout(evs []sandbox.ProcessEvent) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == sandbox.ProcessEventStdout {
			b.Write(e.Data)
		}
	}
	return b.String()
}

func hasEnd(evs []sandbox.ProcessEvent) bool {
	return len(evs) > 0 && evs[len(evs)-1].Type == sandbox.ProcessEventEnd
}

// TestLiveLifecycle: Create starts the sandbox at once and holds it (as
// the session's); its answer has the defaults filled in and is published
// to the registry; the id is taken; the timeout does not slide with use,
// SetTimeout moves it from now; past it the sandbox is gone, and the
// reaper leaves nothing of it.
func TestLiveLifecycle(t *testing.T) {
	u := newUnit(t)
	start := u.clock.Now()
	info := u.create(sandbox.CreateSandboxRequest{SandboxID: "box", Metadata: map[string]string{"owner": "ann"}, TimeoutSeconds: 60})
	want := sandbox.Info{SandboxID: "box", Language: "bash", Image: info.Image, Tier: "container",
		Limits:   sandbox.SandboxLimits{MemoryMB: 512, CPUCores: 1, CPUs: 1, Pids: 256, DiskMB: 1024},
		Metadata: map[string]string{"owner": "ann"}, State: "running", TimeoutSeconds: 60,
		CreatedAt: start, ExpiresAt: start.Add(time.Minute), Lifecycle: &sandbox.SandboxLifecycle{OnTimeout: "kill"}}
	if b, w := mustJSON(t, info), mustJSON(t, want); b != w {
		t.Errorf("Create =\n%s\nwant\n%s", b, w)
	}
	sb := u.heldSandbox("box")
	if sb == nil || !u.f.Alive(sb.ID()) {
		t.Fatal("no sandbox held after Create")
	}
	if h, _ := u.f.Fleet.Holder(sb.ID()); h != fleet.HolderSandbox {
		t.Errorf("the sandbox is held by %q, want the session", h)
	}
	published := string(u.reg.Published(key("t", "box")))
	if published != mustJSON(t, info) {
		t.Errorf("published %s, want %s", published, mustJSON(t, info))
	}
	if _, err := u.m.Create(t.Context(), "t", sandbox.CreateSandboxRequest{SandboxID: "box"}); !errors.Is(err, ErrExists) {
		t.Errorf("Create of a taken id: %v, want ErrExists", err)
	}
	if l := u.m.Sandboxes("t"); len(l) != 1 || l[0].SandboxID != "box" {
		t.Errorf("Sandboxes = %+v, want box", l)
	}
	if l := u.m.Sandboxes("other"); len(l) != 0 {
		t.Errorf("another tenant's Sandboxes = %+v", l)
	}

	// Use does not slide the timeout.
	u.clock.Advance(30 * time.Second)
	p := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"true"}})
	u.until("box", p.PID, 0, hasEnd)
	if _, err := u.m.WriteFile(t.Context(), "t", "box", "a.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if got, _ := u.m.Sandbox("t", "box"); !got.ExpiresAt.Equal(start.Add(time.Minute)) {
		t.Errorf("after use it expires at %v, want %v still", got.ExpiresAt, start.Add(time.Minute))
	}
	got, err := u.m.SetTimeout(t.Context(), "t", "box", 2*time.Minute)
	if now := u.clock.Now(); err != nil || !got.ExpiresAt.Equal(now.Add(2*time.Minute)) || got.TimeoutSeconds != 120 {
		t.Errorf("SetTimeout = %+v, %v; want expiry %v", got, err, now.Add(2*time.Minute))
	}
	for _, bad := range []time.Duration{0, -time.Second, u.cfg.MaxTimeout + time.Second} {
		var ie *validate.InputError
		if _, err := u.m.SetTimeout(t.Context(), "t", "box", bad); !errors.As(err, &ie) || ie.Field != "timeout_seconds" {
			t.Errorf("SetTimeout(%v): %v, want an input error on timeout_seconds", bad, err)
		}
	}

	u.clock.Advance(2*time.Minute + time.Second)
	if _, err := u.m.Sandbox("t", "box"); !errors.Is(err, ErrNotFound) {
		t.Errorf("past its timeout: %v, want ErrNotFound", err)
	}
	if _, err := u.m.StartProcess(t.Context(), "t", "box", sandbox.StartProcessRequest{Cmd: []string{"true"}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a process past the timeout: %v, want ErrNotFound", err)
	}
	u.table.Reap()
	if u.f.Alive(sb.ID()) || u.f.AliveCount() != 0 {
		t.Errorf("after the reaper %d sandboxes live", u.f.AliveCount())
	}
	if _, err := os.Stat(u.sessionDir("box")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's files are still there: %v", err)
	}
	if _, drops := u.reg.Asked(); len(drops) != 1 || drops[0] != "t/box" {
		t.Errorf("holds dropped: %v, want t/box", drops)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLiveCreateRefuses: a request out of bounds is refused, naming the
// field, before anything is made or held.
func TestLiveCreateRefuses(t *testing.T) {
	u := newUnit(t)
	big := map[string]string{}
	for i := range 40 {
		big[string(rune('a'+i%26))+strings.Repeat("k", i)] = "v"
	}
	for _, tc := range []struct {
		req   sandbox.CreateSandboxRequest
		field string // of the *validate.InputError; "" for ErrInvalid
	}{
		{sandbox.CreateSandboxRequest{SandboxID: "../x"}, "sandbox_id"},
		{sandbox.CreateSandboxRequest{TimeoutSeconds: -1}, "timeout_seconds"},
		{sandbox.CreateSandboxRequest{TimeoutSeconds: 1 << 30}, "timeout_seconds"},
		{sandbox.CreateSandboxRequest{Limits: sandbox.SandboxLimits{Pids: 1}}, "limits.pids"},
		{sandbox.CreateSandboxRequest{Limits: sandbox.SandboxLimits{DiskMB: 1 << 30}}, "limits.disk_mb"},
		{sandbox.CreateSandboxRequest{Limits: sandbox.SandboxLimits{MemoryMB: 1 << 30}}, "limits.memory_mb"},
		{sandbox.CreateSandboxRequest{Limits: sandbox.SandboxLimits{CPUs: 100}}, "limits.cpus"},
		{sandbox.CreateSandboxRequest{Limits: sandbox.SandboxLimits{CPUCores: 100}}, "limits.cpu_cores"},
		{sandbox.CreateSandboxRequest{Limits: sandbox.SandboxLimits{CPUCores: 1, CPUs: 2}}, "limits.cpus"},
		{sandbox.CreateSandboxRequest{Tier: "vm"}, "tier"},
		{sandbox.CreateSandboxRequest{Language: "cobol"}, "language"},
		{sandbox.CreateSandboxRequest{Env: map[string]string{"PATH": "/evil"}}, "env.PATH"},
		{sandbox.CreateSandboxRequest{Metadata: big}, "metadata"},
		{sandbox.CreateSandboxRequest{Metadata: map[string]string{"k": strings.Repeat("v", 5000)}}, "metadata"},
		{sandbox.CreateSandboxRequest{Metadata: map[string]string{"k": "a\x00b"}}, "metadata"},
		{sandbox.CreateSandboxRequest{Lifecycle: &sandbox.SandboxLifecycle{OnTimeout: "sleep"}}, "lifecycle.on_timeout"},
		{sandbox.CreateSandboxRequest{Lifecycle: &sandbox.SandboxLifecycle{KeepMemory: new(bool)}}, "lifecycle.keep_memory"},
	} {
		req := tc.req
		if req.Tier == "" {
			req.Tier = sandbox.IsolationContainer
		}
		_, err := u.m.Create(t.Context(), "t", req)
		var ie *validate.InputError
		switch {
		case tc.field == "" && !errors.Is(err, ErrInvalid):
			t.Errorf("%+v: %v, want ErrInvalid", tc.req, err)
		case tc.field != "" && (!errors.As(err, &ie) || ie.Field != tc.field):
			t.Errorf("%+v: %v, want an input error on %s", tc.req, err, tc.field)
		}
	}
	if holds, _ := u.reg.Asked(); len(holds) != 0 {
		t.Errorf("refused requests asked the registry: %v", holds)
	}
	if n := u.f.AliveCount(); n != 0 {
		t.Errorf("%d sandboxes made", n)
	}
}

// TestProcessStdinAndReplay: a process's output goes to a buffer that a
// client connecting late reads from the start (its start event first);
// stdin written reaches the process, closing it ends cat; a second reader
// resuming after an event gets only what followed.
func TestProcessStdinAndReplay(t *testing.T) {
	u := newUnit(t)
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	p := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true, Tag: "echo"})
	if p.PID <= 0 || !p.Running || p.Tag != "echo" || p.Cwd != "/workspace" {
		t.Fatalf("started %+v", p)
	}
	if _, err := u.m.WriteStdin(t.Context(), "t", "box", p.PID, strings.NewReader("hello\n")); err != nil {
		t.Fatal(err)
	}
	first := u.until("box", p.PID, 0, func(evs []sandbox.ProcessEvent) bool { return stdout(evs) == "hello\n" })
	if first[0].Type != sandbox.ProcessEventStart || first[0].Seq != 1 || first[0].PID != p.PID {
		t.Errorf("first event %+v, want the start with the pid", first[0])
	}
	last := first[len(first)-1].Seq
	// Binary-safe: bytes that are no UTF-8 come back as they were.
	raw := []byte{0xff, 0x00, 0xfe, '\n'}
	if _, err := u.m.WriteStdin(t.Context(), "t", "box", p.PID, bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	if err := u.m.CloseStdin("t", "box", p.PID); err != nil {
		t.Fatal(err)
	}
	rest := u.until("box", p.PID, last, hasEnd)
	if got := stdout(rest); got != string(raw) {
		t.Errorf("after seq %d: stdout %q, want %q", last, got, raw)
	}
	end := rest[len(rest)-1]
	if end.Exit == nil || end.Exit.ExitCode != 0 || end.Exit.Signal != "" {
		t.Errorf("end %+v, want exit 0", end)
	}
	// A second client, later: everything, in order.
	all := u.until("box", p.PID, 0, hasEnd)
	if got := stdout(all); got != "hello\n"+string(raw) || all[0].Type != sandbox.ProcessEventStart {
		t.Errorf("replayed %q (first %s)", got, all[0].Type)
	}
	info, err := u.m.Process(t.Context(), "t", "box", p.PID, true)
	if err != nil || info.Running || info.Exit == nil || info.Exit.ExitCode != 0 {
		t.Errorf("Process = %+v, %v", info, err)
	}
	if _, err := u.m.WriteStdin(t.Context(), "t", "box", p.PID, strings.NewReader("late")); !errors.Is(err, ErrEnded) {
		t.Errorf("stdin of an ended process: %v, want ErrEnded", err)
	}
	q := u.start("box", sandbox.StartProcessRequest{Shell: "echo $((6*7)) >&2"})
	if got := u.until("box", q.PID, 0, hasEnd); len(got) < 2 || string(got[1].Data) != "42\n" || got[1].Type != sandbox.ProcessEventStderr {
		t.Errorf("a shell line's events: %+v", got)
	}
	if _, err := u.m.WriteStdin(t.Context(), "t", "box", q.PID, strings.NewReader("x")); !errors.Is(err, ErrNoStdin) && !errors.Is(err, ErrEnded) {
		t.Errorf("stdin of a process without it: %v", err)
	}
	if _, err := u.m.ProcessOutput("t", "box", 1<<30); !errors.Is(err, ErrNoProcess) {
		t.Errorf("a missing process: %v, want ErrNoProcess", err)
	}
}

// TestProcessSignalAndWait: a signal ends a process with the matching
// status; a wait returns once it ended and honours its context.
func TestProcessSignalAndWait(t *testing.T) {
	u := newUnit(t)
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	p := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"sleep", "300"}})
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := u.m.Process(short, "t", "box", p.PID, true); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait on a running process: %v, want its context's end", err)
	}
	waited := make(chan sandbox.ProcessInfo, 1)
	go func() {
		info, err := u.m.Process(t.Context(), "t", "box", p.PID, true)
		if err != nil {
			t.Error(err)
		}
		waited <- info
	}()
	sig, err := ParseSignal("SIGTERM")
	if err != nil {
		t.Fatal(err)
	}
	if err := u.m.Signal(t.Context(), "t", "box", p.PID, sig); err != nil {
		t.Fatal(err)
	}
	info := <-waited
	if info.Exit == nil || info.Exit.ExitCode != 143 || info.Exit.Signal != "SIGTERM" || info.Running {
		t.Errorf("after SIGTERM: %+v (exit %+v), want 143 SIGTERM", info, info.Exit)
	}
	if err := u.m.Signal(t.Context(), "t", "box", p.PID, sig); !errors.Is(err, ErrEnded) {
		t.Errorf("signal to an ended process: %v, want ErrEnded", err)
	}
	for in, want := range map[string]syscall.Signal{"TERM": syscall.SIGTERM, "sigkill": syscall.SIGKILL, "2": syscall.SIGINT} {
		if got, err := ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "SIGNOPE", "0", "65", "-9", "9x"} {
		if _, err := ParseSignal(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSignal(%q): %v, want ErrInvalid", bad, err)
		}
	}
	l, err := u.m.Processes("t", "box")
	if err != nil || len(l) != 1 || l[0].PID != p.PID || l[0].Running || l[0].Cmd[0] != "sleep" {
		t.Errorf("Processes = %+v, %v", l, err)
	}
}

// TestProcessLimits: a sandbox runs MaxProcesses at once; a request that
// is no process is refused naming its field; a PTY is not supported yet.
func TestProcessLimits(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.MaxProcesses = 2 })
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	for range 2 {
		u.start("box", sandbox.StartProcessRequest{Cmd: []string{"sleep", "300"}})
	}
	if _, err := u.m.StartProcess(t.Context(), "t", "box", sandbox.StartProcessRequest{Cmd: []string{"true"}}); !errors.Is(err, ErrTooMany) {
		t.Errorf("a third process: %v, want ErrTooMany", err)
	}
	for _, tc := range []struct {
		req   sandbox.StartProcessRequest
		field string
	}{
		{sandbox.StartProcessRequest{}, "cmd"},
		{sandbox.StartProcessRequest{Cmd: []string{"a"}, Shell: "b"}, "cmd"},
		{sandbox.StartProcessRequest{Cmd: []string{"a\x00"}}, "cmd"},
		{sandbox.StartProcessRequest{Cmd: []string{"echo", strings.Repeat("x", maxArg+1)}}, "cmd"}, // E2BIG at exec
		{sandbox.StartProcessRequest{Shell: strings.Repeat("x", 200<<10)}, "cmd"},
		{sandbox.StartProcessRequest{Cmd: []string{"true"}, Cwd: "rel"}, "cwd"},
		{sandbox.StartProcessRequest{Cmd: []string{"true"}, Cwd: "/a/../b"}, "cwd"},
		{sandbox.StartProcessRequest{Cmd: []string{"true"}, Tag: strings.Repeat("t", 300)}, "tag"},
		{sandbox.StartProcessRequest{Cmd: []string{"true"}, Env: map[string]string{"1X": "y"}}, "env"},
	} {
		var ie *validate.InputError
		if _, err := u.m.StartProcess(t.Context(), "t", "box", tc.req); !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%+v: %v, want an input error on %s", tc.req, err, tc.field)
		}
	}
	var ie *validate.InputError
	if _, err := u.m.StartProcess(t.Context(), "t", "box", sandbox.StartProcessRequest{Cmd: []string{"true"}, PTY: &sandbox.PTYSize{Cols: 80}}); !errors.As(err, &ie) || ie.Field != "pty" {
		t.Errorf("a PTY without rows: %v, want an input error on pty", err)
	}
}

// TestProcessNotFoundProgram: a program that does not exist is the
// request's error, naming cmd.
func TestProcessNotFoundProgram(t *testing.T) {
	u := newUnit(t)
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	var ie *validate.InputError
	if _, err := u.m.StartProcess(t.Context(), "t", "box", sandbox.StartProcessRequest{Cmd: []string{"no-such-program-here"}}); !errors.As(err, &ie) || ie.Field != "cmd" {
		t.Errorf("a missing program: %v, want an input error on cmd", err)
	}
	if _, err := u.m.StartProcess(t.Context(), "t", "box", sandbox.StartProcessRequest{Cmd: []string{"true"}, Cwd: "/workspace/missing"}); !errors.As(err, &ie) {
		t.Errorf("a missing working directory: %v, want an input error", err)
	}
}

// TestOutputBound: the buffer keeps the latest bytes; a reader from the
// start learns how much was dropped, one past the drop does not.
func TestOutputBound(t *testing.T) {
	o := newOutput(10)
	o.proc = &Process{}
	o.mu.Lock()
	o.addLocked(sandbox.ProcessEvent{Type: sandbox.ProcessEventStart, PID: 7})
	o.mu.Unlock()
	for _, s := range []string{"aaaa", "bbbb", "cccc", "dd"} {
		o.Stdout([]byte(s))
	}
	evs, _, ended := o.Events(0)
	if ended {
		t.Fatal("ended before its end")
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if got := strings.Join(types, ","); got != "start,dropped,stdout,stdout,stdout" {
		t.Fatalf("events %s (%+v)", got, evs)
	}
	if evs[1].Dropped != 4 || evs[1].Seq != 2 || stdout(evs) != "bbbbccccdd" {
		t.Errorf("dropped %+v, kept %q", evs[1], stdout(evs))
	}
	if got, _, _ := o.Events(evs[1].Seq); len(got) != 3 || got[0].Type != sandbox.ProcessEventStdout {
		t.Errorf("after the drop: %+v", got)
	}
	o.end(Exit{Code: 3})
	got, _, ended := o.Events(^uint64(0) - 1)
	if !ended || len(got) != 0 {
		t.Errorf("after everything: %+v, ended %v", got, ended)
	}
}

// TestExecutionInLiveSandbox: an execution of a live sandbox runs in its
// held sandbox beside its processes and reaps none of them, even at its
// deadline (its own process group goes, not the sandbox); it slides no
// timeout and the sandbox stays held.
func TestExecutionInLiveSandbox(t *testing.T) {
	u := newUnit(t)
	info := u.create(sandbox.CreateSandboxRequest{SandboxID: "box", Env: map[string]string{"GREETING": "hi"}})
	held := u.heldSandbox("box")
	bg := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"sleep", "300"}})
	u.clock.Advance(time.Second)
	out, ran := u.f.RunPython(u.t, u.sessions.Acquirer("t", "box"), "t", "box", "import os\nprint(os.environ['GREETING'])")
	if out != "hi\n" || ran != held.ID() {
		t.Errorf("the execution printed %q in %s; want the sandbox's variable, in the held %s", out, ran, held.ID())
	}
	job, err := u.f.Prepare(sandbox.ExecuteRequest{Language: "python", Code: "import time\ntime.sleep(60)", SessionID: "box",
		Isolation: sandbox.IsolationContainer, Limits: sandbox.Limits{TimeoutMS: 200}})
	if err != nil {
		t.Fatal(err)
	}
	job.Tenant = "t"
	if err := u.f.Acquire(t.Context(), job, u.m.Acquirer("t", "box")); err != nil {
		t.Fatal(err)
	}
	if job.Lease.Fate != fleet.Held || job.Lease.Sandbox != held {
		t.Errorf("lent %v as %v, want the held sandbox, held", job.Lease.Sandbox.ID(), job.Lease.Fate)
	}
	if res := u.f.Run(t.Context(), job, nil); res.Error == nil || res.Error.Type != sandbox.ErrTimeout || res.TierReason != "runs in the session's live sandbox" {
		t.Errorf("a sleeping execution: %+v (tier %s, %q), want a timeout, in the live sandbox", res.Error, res.Tier, res.TierReason)
	}
	if got := u.heldSandbox("box"); got != held || !u.f.Alive(held.ID()) {
		t.Errorf("the sandbox went with the execution's timeout")
	}
	if p, err := u.m.Process(t.Context(), "t", "box", bg.PID, false); err != nil || !p.Running {
		t.Errorf("the background process: %+v, %v; want it running", p, err)
	}
	if h, _ := u.f.Fleet.Holder(held.ID()); h != fleet.HolderSandbox {
		t.Errorf("after executions the sandbox is held by %q", h)
	}
	got, _ := u.m.Sandbox("t", "box")
	if got.Executions != 2 || !got.ExpiresAt.Equal(info.ExpiresAt) {
		t.Errorf("after two executions: %d executions, expires %v; want 2, %v", got.Executions, got.ExpiresAt, info.ExpiresAt)
	}
}

// TestLiveSandboxMadeAgain: when the held sandbox dies, its processes end
// with an error and the next call makes it again on the same disk.
func TestLiveSandboxMadeAgain(t *testing.T) {
	u := newUnit(t)
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	if _, err := u.m.WriteFile(t.Context(), "t", "box", "/workspace/keep.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	p := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"sleep", "300"}})
	old := u.heldSandbox("box")
	if err := old.Kill(t.Context()); err != nil {
		t.Fatal(err)
	}
	evs := u.until("box", p.PID, 0, hasEnd)
	// Its end: lost with the agent, or reported killed as the agent went.
	if end := evs[len(evs)-1]; end.Exit == nil || end.Exit.Error != "sandbox_ended" && end.Exit.Signal != "SIGKILL" {
		t.Errorf("the process's end: %+v, want sandbox_ended or SIGKILL", end.Exit)
	}
	q := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"cat", "/workspace/keep.txt"}})
	if got := stdout(u.until("box", q.PID, 0, hasEnd)); got != "kept" {
		t.Errorf("in the new sandbox the file holds %q", got)
	}
	if now := u.heldSandbox("box"); now == old || u.f.Alive(old.ID()) {
		t.Errorf("the dead sandbox was not replaced")
	}
	if info, _ := u.m.Sandbox("t", "box"); info.Restarts != 1 {
		t.Errorf("restarts %d, want 1", info.Restarts)
	}
}

// TestLiveFiles: files by absolute or relative path, binary-safe; listing
// with depth; stat; remove; paths outside /workspace and /tmp refused.
func TestLiveFiles(t *testing.T) {
	u := newUnit(t)
	ctx := t.Context()
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	data := []byte{0, 1, 2, 0xff, '\n'}
	f, err := u.m.WriteFile(ctx, "t", "box", "d/e/data.bin", bytes.NewReader(data))
	if err != nil || f.Path != "/workspace/d/e/data.bin" || f.Size != int64(len(data)) || f.Type != "file" {
		t.Fatalf("WriteFile = %+v, %v", f, err)
	}
	var b bytes.Buffer
	if err := u.m.ReadFile(ctx, "t", "box", "/workspace/d/e/data.bin", &b); err != nil || !bytes.Equal(b.Bytes(), data) {
		t.Errorf("ReadFile = %q, %v", b.Bytes(), err)
	}
	if _, err := u.m.WriteFile(ctx, "t", "box", "/tmp/t.txt", strings.NewReader("tmp")); err != nil {
		t.Error(err)
	}
	l, err := u.m.ListFiles(ctx, "t", "box", "/workspace", 1)
	if err != nil || len(l) != 1 || l[0].Path != "/workspace/d" || l[0].Type != "dir" {
		t.Errorf("ListFiles depth 1 = %+v, %v", l, err)
	}
	l, err = u.m.ListFiles(ctx, "t", "box", "/workspace", 3)
	var paths []string
	for _, f := range l {
		paths = append(paths, f.Path)
	}
	if err != nil || strings.Join(paths, " ") != "/workspace/d /workspace/d/e /workspace/d/e/data.bin" {
		t.Errorf("ListFiles depth 3 = %v, %v", paths, err)
	}
	if st, err := u.m.StatFile(ctx, "t", "box", "d/e"); err != nil || st.Type != "dir" || st.Path != "/workspace/d/e" {
		t.Errorf("StatFile = %+v, %v", st, err)
	}
	if err := u.m.RemoveFile(ctx, "t", "box", "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := u.m.StatFile(ctx, "t", "box", "d"); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("StatFile of a removed directory: %v, want ENOENT", err)
	}
	for _, bad := range []string{"/proc/self/environ", "/workspace/../etc", "/workspace/", "a/../../b", "/sys/kernel", "/.corral/agent", "/dev/null"} {
		if _, err := u.m.StatFile(ctx, "t", "box", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("StatFile(%q): %v, want ErrInvalid", bad, err)
		}
	}
	for name, err := range map[string]error{
		"remove the top": u.m.RemoveFile(ctx, "t", "box", "/workspace"),
		"read the top":   u.m.ReadFile(ctx, "t", "box", "/tmp", &b),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(u.sessionDir("box"), "disk.img.fake")); err != nil {
		t.Errorf("the sandbox's disk is not in its session's directory: %v", err)
	}
}

// TestLiveAfterRestart: a manager started on a live sandbox left on disk
// (a node's restart) makes its sandbox again at the next call, on its
// disk, and counts a restart; its timeout is the one it had.
func TestLiveAfterRestart(t *testing.T) {
	u := newUnit(t)
	info := u.create(sandbox.CreateSandboxRequest{SandboxID: "box", Metadata: map[string]string{"k": "v"}})
	if _, err := u.m.WriteFile(t.Context(), "t", "box", "kept.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	u.close()
	if n := u.f.AliveCount(); n != 0 {
		t.Fatalf("%d sandboxes after Close", n)
	}
	u.open()
	got, err := u.m.Sandbox("t", "box")
	if err != nil || !got.ExpiresAt.Equal(info.ExpiresAt) || got.Metadata["k"] != "v" || got.Restarts != 0 {
		t.Fatalf("after the restart: %+v, %v", got, err)
	}
	p := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"cat", "kept.txt"}})
	if out := stdout(u.until("box", p.PID, 0, hasEnd)); out != "kept" {
		t.Errorf("the file after the restart: %q", out)
	}
	if got, _ := u.m.Sandbox("t", "box"); got.Restarts != 1 {
		t.Errorf("restarts %d, want 1", got.Restarts)
	}
}

// TestOutputShrinksAtEnd: an ended process keeps the last endedKeep bytes
// of its output; a reader learns what went.
func TestOutputShrinksAtEnd(t *testing.T) {
	o := newOutput(1 << 20)
	o.proc = &Process{}
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for range 8 {
		o.Stdout(chunk)
	}
	if evs, _, _ := o.Events(0); len(stdout(evs)) != 8*len(chunk) {
		t.Fatalf("running: %d bytes buffered, want all %d", len(stdout(evs)), 8*len(chunk))
	}
	o.end(Exit{})
	evs, _, ended := o.Events(0)
	if n := len(stdout(evs)); !ended || n > endedKeep || n == 0 {
		t.Errorf("ended: %d bytes buffered, want at most %d", n, endedKeep)
	}
	if evs[0].Type != sandbox.ProcessEventDropped || evs[0].Dropped != int64(8*len(chunk)-len(stdout(evs))) {
		t.Errorf("first event %+v, want what was dropped", evs[0])
	}
}

// TestProcessTerminal: a process started with a PTY runs on a terminal of
// that size, which a resize changes; input typed at it reaches it; a
// process without one cannot be resized.
func TestProcessTerminal(t *testing.T) {
	u := newUnit(t)
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	p := u.start("box", sandbox.StartProcessRequest{Shell: "tty; stty size; read line; stty size; echo got $line",
		PTY: &sandbox.PTYSize{Cols: 100, Rows: 30}})
	if !p.Stdin || p.PTY == nil || p.PTY.Cols != 100 {
		t.Errorf("started %+v", p)
	}
	evs := u.until("box", p.PID, 0, func(evs []sandbox.ProcessEvent) bool { return strings.Contains(stdout(evs), "30 100") })
	if out := stdout(evs); !strings.Contains(out, "/dev/pts/") {
		t.Fatalf("on a terminal: %q", out)
	}
	if err := u.m.Resize(t.Context(), "t", "box", p.PID, sandbox.PTYSize{Cols: 120, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if _, err := u.m.WriteStdin(t.Context(), "t", "box", p.PID, strings.NewReader("typed\n")); err != nil {
		t.Fatal(err)
	}
	out := stdout(u.until("box", p.PID, 0, hasEnd))
	if !strings.Contains(out, "40 120") || !strings.Contains(out, "got typed") {
		t.Errorf("after a resize and a line: %q", out)
	}
	if err := u.m.Resize(t.Context(), "t", "box", p.PID, sandbox.PTYSize{Cols: 80, Rows: 24}); !errors.Is(err, ErrEnded) {
		t.Errorf("resize of an ended process: %v, want ErrEnded", err)
	}
	q := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"sleep", "300"}})
	if err := u.m.Resize(t.Context(), "t", "box", q.PID, sandbox.PTYSize{Cols: 80, Rows: 24}); !errors.Is(err, ErrNoTerminal) {
		t.Errorf("resize without a terminal: %v, want ErrNoTerminal", err)
	}
}

// TestFileOpsAndWatch: directories made and moved; a watch reports a file
// a process creates, and ends when its directory goes.
func TestFileOpsAndWatch(t *testing.T) {
	u := newUnit(t)
	ctx := t.Context()
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	d, err := u.m.MakeDir(ctx, "t", "box", "a/b", true)
	if err != nil || d.Type != "dir" || d.Path != "/workspace/a/b" {
		t.Fatalf("MakeDir = %+v, %v", d, err)
	}
	if _, err := u.m.MakeDir(ctx, "t", "box", "a/b", false); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("MakeDir of one there, without parents: %v, want EEXIST", err)
	}
	events := make(chan sandbox.FileEvent, 64)
	stop, err := u.m.Watch(ctx, "t", "box", "/workspace/a", true, func(ev sandbox.FileEvent) { events <- ev })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The path as an argument of its own: the fake sandbox's agent maps
	// those to its root (a shell line's words are left as they are).
	p := u.start("box", sandbox.StartProcessRequest{Cmd: []string{"python3", "-c",
		"import sys; open(sys.argv[1], 'w').write('made\\n')", "/workspace/a/b/new.txt"}})
	u.until("box", p.PID, 0, hasEnd)
	want := sandbox.FileEvent{Path: "/workspace/a/b/new.txt", Op: "create"}
	for got := false; !got; {
		select {
		case ev := <-events:
			got = ev == want
		case <-time.After(30 * time.Second):
			t.Fatalf("no %+v in 30 s", want)
		}
	}
	f, err := u.m.Move(ctx, "t", "box", "a/b/new.txt", "/workspace/moved.txt")
	if err != nil || f.Path != "/workspace/moved.txt" || f.Size != 5 {
		t.Errorf("Move = %+v, %v", f, err)
	}
	if _, err := u.m.Move(ctx, "t", "box", "/workspace", "/workspace/x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("moving the top: %v, want ErrInvalid", err)
	}
	if err := u.m.RemoveFile(ctx, "t", "box", "a"); err != nil {
		t.Fatal(err)
	}
	for ended := false; !ended; {
		select {
		case ev := <-events:
			ended = ev.Op == "end"
		case <-time.After(30 * time.Second):
			t.Fatal("the watch did not end when its directory went")
		}
	}
}
