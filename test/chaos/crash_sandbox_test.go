package chaos

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// crashSandboxes is how many live sandboxes the crashed node owns: half
// on each tier.
const crashSandboxes = 10

// TestCrashKeepsLiveSandboxes: a node owning live sandboxes on both tiers
// (two of them paused, one per tier, the gVisor one with its memory) is
// killed with SIGKILL and started again on its data directory; then, the
// two paused again, it is stopped with SIGTERM (as an upgrade stops it)
// and started again. Done when, after each,
// every sandbox answers again with its files: a file written through the
// file API and one written by root into the system's writable layer; the
// paused gVisor one resumes with its memory and with what the node held
// of it: a process it saved running on, listed again as running with its
// pid, and its python code context, same id, with x = 41 still set (x + 1
// gives 42). A running sandbox is made again on its disk at its next call
// (restarts counts it); a paused one resumes.
func TestCrashKeepsLiveSandboxes(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	c := sandbox.NewClient(sandbox.Config{Endpoint: srv.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute, MaxRetries: 4})
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()

	var all []*crashSandbox
	for i := range crashSandboxes {
		tier := sandbox.TierContainer
		if i%2 == 1 {
			tier = sandbox.TierGVisor
		}
		sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: tier, Language: "python", TimeoutSeconds: 900})
		if err != nil {
			t.Fatalf("create sandbox %d (%s): %v", i, tier, err)
		}
		m := &crashSandbox{sb: sb, tier: tier, want: fmt.Sprintf("kept %d %s", i, sb.ID)}
		all = append(all, m)
		if _, err := sb.Files().Write(ctx, "keep.txt", strings.NewReader(m.want)); err != nil {
			t.Fatalf("%s: write: %v", sb.ID, err)
		}
		run(ctx, t, sb, "root", "echo "+sb.ID+" > /usr/local/share/kept")
	}
	// One paused sandbox per tier: the gVisor one with a process running,
	// which its memory keeps.
	for _, m := range all[:2] {
		m.paused = true
		if m.tier == sandbox.TierGVisor {
			p, err := m.sb.Start(ctx, sandbox.StartProcessRequest{Shell: "echo $$ > /home/user/bg.pid; exec sleep 3600"})
			if err != nil {
				t.Fatalf("%s: start: %v", m.sb.ID, err)
			}
			m.pid = p.PID
			waitFile(ctx, t, m.sb, "/home/user/bg.pid")
			cc, err := m.sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
			if err != nil {
				t.Fatalf("%s: create a context: %v", m.sb.ID, err)
			}
			m.cid = cc.ID
			if ex, err := m.sb.RunCode(ctx, cc.ID, "x = 41", sandbox.RunCodeOptions{}); err != nil || ex.Error != nil {
				t.Fatalf("%s: x = 41: %+v, %v", m.sb.ID, ex, err)
			}
		}
	}

	for _, down := range []struct {
		name string
		stop func()
	}{{"kill -9", srv.Kill}, {"SIGTERM", srv.Stop}} {
		for _, m := range all[:2] {
			info, err := m.sb.Pause(ctx)
			if err != nil {
				t.Fatalf("%s: pause: %v", m.sb.ID, err)
			}
			m.memory = info.Pause != nil && info.Pause.Memory
			if m.tier == sandbox.TierGVisor && !m.memory {
				t.Fatalf("%s: a gVisor sandbox paused without its memory: %+v", m.sb.ID, info.Pause)
			}
		}
		t.Logf("%s the node, then start it again on its data directory", down.name)
		down.stop()
		srv.Launch()
		kept := 0
		for _, m := range all {
			if checkKept(ctx, t, m) {
				kept++
			}
		}
		t.Logf("%d of %d live sandboxes answer with their files after %s and a restart", kept, len(all), down.name)
	}
	for _, m := range all {
		if err := m.sb.Kill(ctx); err != nil {
			t.Errorf("%s: kill: %v", m.sb.ID, err)
		}
	}
}

// crashSandbox is one of TestCrashKeepsLiveSandboxes's sandboxes.
type crashSandbox struct {
	sb     *sandbox.Sandbox
	tier   sandbox.Tier
	want   string // keep.txt
	paused bool
	// memory: paused with its memory (gVisor), with a process (pid) that
	// must run on after the resume and a code context (cid) holding
	// x = 41.
	memory bool
	pid    int
	cid    string
}

// checkKept checks one sandbox after its node came back (see
// TestCrashKeepsLiveSandboxes) and reports whether it answered with all
// it should have kept.
func checkKept(ctx context.Context, t *testing.T, m *crashSandbox) bool {
	t.Helper()
	if m.paused {
		info, err := m.sb.Resume(ctx)
		if err != nil {
			t.Errorf("%s (%s, paused): resume after the crash: %v", m.sb.ID, m.tier, err)
			return false
		}
		if m.memory && (info.Resume == nil || !info.Resume.Memory) {
			t.Errorf("%s (%s): resumed after the crash without the memory it was paused with: %+v", m.sb.ID, m.tier, info.Resume)
			return false
		}
	}
	var got bytes.Buffer
	if err := m.sb.Files().Read(ctx, "keep.txt", &got); err != nil || got.String() != m.want {
		t.Errorf("%s (%s): keep.txt after the crash: %q, %v (want %q)", m.sb.ID, m.tier, got.String(), err, m.want)
		return false
	}
	if out := run(ctx, t, m.sb, "root", "cat /usr/local/share/kept"); strings.TrimSpace(out) != m.sb.ID {
		t.Errorf("%s (%s): the system layer after the crash: %q", m.sb.ID, m.tier, out)
		return false
	}
	if m.memory {
		// The process the pause saved runs on in the restored memory.
		if out := run(ctx, t, m.sb, "user", "kill -0 $(cat /home/user/bg.pid) && echo alive"); strings.TrimSpace(out) != "alive" {
			t.Errorf("%s (%s): the saved process after the crash: %q", m.sb.ID, m.tier, out)
			return false
		}
		// What the node held of it came back with it: the process in
		// its process list, the context with its variables.
		procs, err := m.sb.Processes(ctx)
		if err != nil {
			t.Errorf("%s: processes after the crash: %v", m.sb.ID, err)
			return false
		}
		i := slices.IndexFunc(procs, func(p sandbox.ProcessInfo) bool { return p.PID == m.pid })
		if i < 0 || !procs[i].Running {
			t.Errorf("%s (%s): process %d after the crash: not listed as running in %+v", m.sb.ID, m.tier, m.pid, procs)
			return false
		}
		ex, err := m.sb.RunCode(ctx, m.cid, "x + 1", sandbox.RunCodeOptions{})
		if err != nil || ex.Error != nil || ex.Text() != "42" {
			t.Errorf("%s (%s): x + 1 in context %s after the crash: %+v, %v (want 42)", m.sb.ID, m.tier, m.cid, ex, err)
			return false
		}
	}
	info, err := m.sb.Info(ctx)
	if err != nil {
		t.Errorf("%s: info: %v", m.sb.ID, err)
		return false
	}
	t.Logf("%s (%s, paused %v): state %s, restarts %d", m.sb.ID, m.tier, m.paused, info.State, info.Restarts)
	return true
}

// waitFile waits until the file at p exists in sb, for up to 30 s.
func waitFile(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, p string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if _, err := sb.Files().Stat(ctx, p); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %s never appeared: %v", sb.ID, p, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run runs shell as user in sb and returns its stdout, failing t unless it
// exits 0.
func run(ctx context.Context, t *testing.T, sb *sandbox.Sandbox, user, shell string) string {
	t.Helper()
	out, errOut, exit, err := sb.Run(ctx, sandbox.StartProcessRequest{Shell: shell, User: user})
	if err != nil || exit == nil || exit.ExitCode != 0 {
		t.Fatalf("%s: %s: %v %+v %s", sb.ID, shell, err, exit, errOut)
	}
	return string(out)
}
