package live

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestResumeAfterRestart: a gVisor sandbox paused with its memory is
// resumed by a node process that did not pause it (the node stopped and
// started again on its directory): what the pausing one held comes back
// from the description beside the memory. Its running process is listed
// with its pid and runs on, its output going on; an ended one is listed as
// it ended; its context keeps its id and x = 41. A process and a context
// the restored agent does not run (their agent ids made unknown in the
// description) come back lost: the process ended with the pause, the
// context's next cell restarts it and says so.
func TestResumeAfterRestart(t *testing.T) {
	testenv.RequireRoot(t)
	e := testenv.Engine(t)
	var logs testenv.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := registry(t)
	dir := t.TempDir()
	open := func() *byID {
		table, err := workspace.Open(t.Context(), workspace.Config{Dir: dir, ReapInterval: time.Minute}, reg, log)
		if err != nil {
			t.Fatal(err)
		}
		lm := New(DefaultConfig(), Deps{Table: table, Engine: e, Fleet: e.Fleet(), Publisher: reg, Log: log})
		t.Cleanup(lm.Close)
		return &byID{Manager: lm, sessions: session.New(session.DefaultConfig(), table, e, e.Fleet(), log)}
	}
	m := open()
	ctx := t.Context()
	if _, err := m.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python",
		Tier: sandbox.Isolation(runtime.TierGVisor), TimeoutSeconds: 600}); err != nil {
		t.Fatal(err)
	}
	start := func(cmd ...string) sandbox.ProcessInfo {
		t.Helper()
		p, err := m.StartProcess(ctx, "t", "box", sandbox.StartProcessRequest{Cmd: cmd, Tag: cmd[0]})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ticker := start("python3", "-u", "-c", "import time, itertools\nfor i in itertools.count():\n    print(i)\n    time.sleep(0.1)")
	doomed := start("sleep", "3600")
	ended := start("true")
	if x, err := m.Process(ctx, "t", "box", ended.PID, true); err != nil || x.Exit == nil || x.Exit.ExitCode != 0 {
		t.Fatalf("true: %+v, %v", x.Exit, err)
	}
	kept, err := m.CreateContext(ctx, "t", "box", kernel.ContextOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	lost, err := m.CreateContext(ctx, "t", "box", kernel.ContextOptions{Language: "python", Cwd: "/tmp"})
	if err != nil {
		t.Fatal(err)
	}
	cell := func(m *byID, cid, code string) []sandbox.ContextEvent {
		t.Helper()
		var evs []sandbox.ContextEvent
		if err := m.RunContext(ctx, "t", "box", cid, code, time.Minute, func(ev sandbox.ContextEvent) { evs = append(evs, ev) }); err != nil {
			t.Fatalf("run %q: %v", code, err)
		}
		return evs
	}
	cell(m, kept.ID, "x = 41")
	cell(m, lost.ID, "y = 1")
	wantContexts, err := m.Contexts(ctx, "t", "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}

	// The description: what the node held, through JSON.
	w, ok := m.table.Lookup("t", "box")
	if !ok {
		t.Fatal("no workspace")
	}
	path := filepath.Join(w.Dir(), "paused", hostStateFile)
	st, err := readHostState(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Processes) != 3 || st.Processes[0].Info.PID != ended.PID || st.Processes[0].Exit == nil ||
		st.Contexts.Contexts == nil || len(st.Contexts.Contexts) != 2 {
		t.Fatalf("description: %+v", st)
	}
	for _, sp := range st.Processes[1:] {
		if sp.Agent == 0 || !sp.Info.Running || sp.Exit != nil {
			t.Errorf("a running process's description: %+v", sp)
		}
	}
	for i := range st.Processes {
		if st.Processes[i].Info.PID == doomed.PID {
			st.Processes[i].Agent = 1 << 30 // the restored agent runs no such process
		}
	}
	st.Contexts.Contexts[1].Process = 1 << 30
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := writeHostState(filepath.Dir(path), st); err != nil {
		t.Fatal(err)
	}

	t.Log("stop the node and start it again on its directory")
	m.Close()
	m = open()
	info, err := m.Resume(ctx, "t", "box")
	if err != nil {
		t.Fatal(err)
	}
	if r := info.Resume; r == nil || !r.Memory || r.Processes != 1 || r.ProcessesLost != 1 || r.Contexts != 1 {
		t.Errorf("resume after the restart: %+v, want memory, 1 process kept, 1 lost, 1 context", r)
	}
	procs, err := m.Processes("t", "box")
	if err != nil {
		t.Fatal(err)
	}
	byPID := map[int]sandbox.ProcessInfo{}
	for _, p := range procs {
		byPID[p.PID] = p
	}
	if p := byPID[ticker.PID]; !p.Running || !slices.Equal(p.Cmd, ticker.Cmd) || p.Tag != "python3" || !p.StartedAt.Equal(ticker.StartedAt) {
		t.Errorf("the ticker after the restart: %+v, want it running as started: %+v", p, ticker)
	}
	if p := byPID[ended.PID]; p.Running || p.Exit == nil || p.Exit.ExitCode != 0 || p.Exit.Error != "" {
		t.Errorf("the ended process after the restart: %+v (exit %+v)", p, p.Exit)
	}
	if p := byPID[doomed.PID]; p.Running || p.Exit == nil || p.Exit.Error != exitPaused {
		t.Errorf("a process the restored agent does not run: %+v (exit %+v), want ended as %s", p, p.Exit, exitPaused)
	}
	// The ticker's output goes on in its new log.
	out, err := m.ProcessOutput("t", "box", ticker.PID)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	for {
		evs, changed, done := out.Events(0)
		if strings.Count(stdout(evs), "\n") >= 3 {
			break
		}
		if done {
			t.Fatalf("the ticker ended after the restart: %+v", evs)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the ticker printed nothing after the restart")
		}
	}
	gotContexts, err := m.Contexts(ctx, "t", "box")
	if err != nil || !slices.Equal(gotContexts, wantContexts) {
		t.Errorf("contexts after the restart: %+v, %v; want %+v", gotContexts, err, wantContexts)
	}
	if got := mainText(cell(m, kept.ID, "x + 1")); got != "42" {
		t.Errorf("x + 1 after the restart = %q, want 42", got)
	}
	evs := cell(m, lost.ID, "'y' in globals()")
	if errorName(evs) != kernel.ErrorContextRestarted || mainText(evs) != "False" {
		t.Errorf("a lost context's first cell: %+v, want %s and a fresh process", evs, kernel.ErrorContextRestarted)
	}
	if err := m.Delete(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "restore a paused sandbox") || strings.Contains(logs.String(), "without its process list") {
		t.Errorf("the restore fell back:\n%s", logs.String())
	}
}
