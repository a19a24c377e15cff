package live

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestAutoPause runs the server's own pauses on real runtimes, both tiers:
// a sandbox whose lifecycle pauses it at its timeout (1 s) is paused then,
// not removed, and its next call (a file read) resumes it, its file there
// and, on gVisor, a context's variable too; an idle one (pause_after_idle
// 1 s) is paused and its next process start resumes it; one a client
// paused stays paused (ErrPaused) unless its lifecycle asks for
// auto-resume.
func TestAutoPause(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.PauseAfterIdle = time.Second
			r := newOnRuntimes(t, cfg)
			table, logs, lm, m := r.table, r.logs, r.lm, r.m
			ctx := t.Context()
			memory := tier == runtime.TierGVisor
			create := func(id string, timeout int64, l *sandbox.SandboxLifecycle) {
				t.Helper()
				if _, err := m.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: id, Language: "python",
					Tier: sandbox.Isolation(tier), TimeoutSeconds: timeout, Lifecycle: l}); err != nil {
					t.Fatal(err)
				}
				if _, err := m.WriteFile(ctx, "t", id, "/workspace/kept.txt", strings.NewReader(id+"\n")); err != nil {
					t.Fatal(err)
				}
			}
			pausedFor := func(id, reason string) {
				t.Helper()
				info, err := m.Sandbox("t", id)
				if err != nil {
					t.Fatalf("%s: %v", id, err)
				}
				if info.State != "paused" || info.Pause == nil || info.Pause.Reason != reason {
					t.Fatalf("%s: state %q, pause %+v; want paused for %s", id, info.State, info.Pause, reason)
				}
				if info.Pause.Memory != memory {
					t.Errorf("%s: paused with memory %v, want %v", id, info.Pause.Memory, memory)
				}
			}
			read := func(id string) error {
				var b bytes.Buffer
				err := m.ReadFile(ctx, "t", id, "/workspace/kept.txt", &b)
				if err == nil && b.String() != id+"\n" {
					t.Errorf("%s: kept.txt = %q after the resume", id, b.String())
				}
				return err
			}

			// At its timeout.
			create("timeout", 1, &sandbox.SandboxLifecycle{OnTimeout: OnTimeoutPause})
			c, err := m.CreateContext(ctx, "t", "timeout", kernel.ContextOptions{Language: "python"})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.RunContext(ctx, "t", "timeout", c.ID, "x = 21", time.Minute, func(sandbox.ContextEvent) {}); err != nil {
				t.Fatal(err)
			}
			info, _ := m.Sandbox("t", "timeout")
			if lc := info.Lifecycle; lc == nil || lc.OnTimeout != OnTimeoutPause || lc.KeepMemory == nil || !*lc.KeepMemory {
				t.Errorf("lifecycle = %+v, want on_timeout pause keeping memory", lc)
			}
			time.Sleep(time.Until(info.ExpiresAt) + 100*time.Millisecond)
			lm.pauseDue(ctx)
			table.Reap()
			pausedFor("timeout", sandbox.PauseTimeout)
			if err := read("timeout"); err != nil {
				t.Fatalf("read a file of a sandbox paused at its timeout: %v", err)
			}
			if info, _ := m.Sandbox("t", "timeout"); info.State != "running" {
				t.Errorf("state after the call = %q, want running", info.State)
			}
			var evs []sandbox.ContextEvent
			err = m.RunContext(ctx, "t", "timeout", c.ID, "x * 2", time.Minute, func(ev sandbox.ContextEvent) { evs = append(evs, ev) })
			switch {
			case memory && err != nil:
				t.Errorf("run a cell after the resume: %v", err)
			case memory && mainText(evs) != "42":
				t.Errorf("x * 2 after the resume = %q, want 42", mainText(evs))
			case !memory && err == nil:
				t.Errorf("a context of a sandbox paused with its files only ran on: %+v", evs)
			}

			// A resume gives it its whole timeout (1 s) again: a longer one
			// keeps it running through what follows.
			if _, err := m.SetTimeout(ctx, "t", "timeout", 10*time.Minute); err != nil {
				t.Fatal(err)
			}

			// Idle, and paused by a client with and without auto-resume.
			create("idle", 600, nil)
			create("client", 600, nil)
			create("auto", 600, &sandbox.SandboxLifecycle{AutoResume: true})
			for _, id := range []string{"client", "auto"} {
				if err := m.Pause(ctx, "t", id); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(1100 * time.Millisecond)
			if _, err := m.StartProcess(ctx, "t", "timeout", sandbox.StartProcessRequest{Cmd: []string{"true"}}); err != nil {
				t.Fatal(err)
			}
			lm.pauseDue(ctx)
			pausedFor("idle", sandbox.PauseIdle)
			pausedFor("client", sandbox.PauseClient)
			pausedFor("auto", sandbox.PauseClient)
			if info, _ := m.Sandbox("t", "timeout"); info.State != "running" {
				t.Errorf("a sandbox just called was paused: %+v", info.Pause)
			}
			p, err := m.StartProcess(ctx, "t", "idle", sandbox.StartProcessRequest{Cmd: []string{"cat", "/workspace/kept.txt"}})
			if err != nil {
				t.Fatalf("start a process in an idle-paused sandbox: %v", err)
			}
			if got, err := m.Process(ctx, "t", "idle", p.PID, true); err != nil || got.Exit == nil || got.Exit.ExitCode != 0 {
				t.Errorf("the process in the resumed sandbox: %+v, %v", got, err)
			}
			if err := read("client"); !errors.Is(err, ErrPaused) {
				t.Errorf("read a file of a sandbox a client paused = %v, want ErrPaused", err)
			}
			if err := read("auto"); err != nil {
				t.Errorf("read a file of a client-paused sandbox with auto_resume: %v", err)
			}
			if t.Failed() {
				t.Log(logs.String())
			}
		})
	}
}
