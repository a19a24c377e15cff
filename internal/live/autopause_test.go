package live

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// TestAutoPauseClock follows the server's pauses on the node's clock (the
// fake runtime: files only). At its timeout a sandbox whose lifecycle
// pauses is paused and kept (the reaper takes the one beside it that is
// killed), answering when it is dropped; a file read resumes it with its
// whole timeout. Nobody calling it for pause_after_idle pauses it again;
// a process start resumes it. Paused, it is dropped after the paused TTL.
func TestAutoPauseClock(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.PauseAfterIdle, c.PausedTTL = 10*time.Minute, time.Hour })
	ctx := t.Context()
	for _, req := range []sandbox.CreateSandboxRequest{
		{SandboxID: "box", Tier: sandbox.IsolationContainer, TimeoutSeconds: 60, Lifecycle: &sandbox.SandboxLifecycle{OnTimeout: OnTimeoutPause}},
		{SandboxID: "plain", Tier: sandbox.IsolationContainer, TimeoutSeconds: 60},
	} {
		info, err := u.m.Create(ctx, "t", req)
		if err != nil {
			t.Fatal(err)
		}
		if want := u.clock.Now().Add(time.Minute); !info.ExpiresAt.Equal(want) {
			t.Errorf("%s: expires_at %s, want %s (its timeout)", req.SandboxID, info.ExpiresAt, want)
		}
	}
	if _, err := u.m.WriteFile(ctx, "t", "box", "/workspace/kept.txt", strings.NewReader("kept")); err != nil {
		t.Fatal(err)
	}
	state := func(id string) sandbox.Info {
		t.Helper()
		info, err := u.m.Sandbox("t", id)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return info
	}
	u.clock.Advance(59 * time.Second)
	u.live.pauseDue(ctx)
	if st := state("box").State; st != "running" {
		t.Fatalf("paused before its timeout: %s", st)
	}
	u.clock.Advance(2 * time.Second)
	u.live.pauseDue(ctx)
	u.table.Reap()
	if _, err := u.m.Sandbox("t", "plain"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the sandbox killed at its timeout: %v, want ErrNotFound", err)
	}
	info := state("box")
	if info.State != "paused" || info.Pause.Reason != sandbox.PauseTimeout {
		t.Fatalf("at its timeout: %s %+v, want paused for timeout", info.State, info.Pause)
	}
	if want := info.Pause.PausedAt.Add(time.Hour); !info.ExpiresAt.Equal(want) {
		t.Errorf("paused: expires_at %s, want %s (the paused TTL)", info.ExpiresAt, want)
	}
	var b bytes.Buffer
	if err := u.m.ReadFile(ctx, "t", "box", "/workspace/kept.txt", &b); err != nil || b.String() != "kept" {
		t.Fatalf("read after the pause at the timeout: %q, %v", b.String(), err)
	}
	info = state("box")
	if want := u.clock.Now().Add(time.Minute); info.State != "running" || !info.ExpiresAt.Equal(want) {
		t.Errorf("after the call: %s, expires_at %s; want running until %s", info.State, info.ExpiresAt, want)
	}

	// Idle.
	if _, err := u.m.SetTimeout(ctx, "t", "box", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	u.clock.Advance(9 * time.Minute)
	u.live.pauseDue(ctx)
	if st := state("box").State; st != "running" {
		t.Fatalf("paused before its idle time: %s", st)
	}
	u.clock.Advance(2 * time.Minute)
	u.live.pauseDue(ctx)
	if info := state("box"); info.State != "paused" || info.Pause.Reason != sandbox.PauseIdle {
		t.Fatalf("idle: %s %+v, want paused for idle", info.State, info.Pause)
	}
	if _, err := u.m.StartProcess(ctx, "t", "box", sandbox.StartProcessRequest{Cmd: []string{"true"}}); err != nil {
		t.Fatalf("start a process in an idle-paused sandbox: %v", err)
	}
	if st := state("box").State; st != "running" {
		t.Errorf("after the process start: %s, want running", st)
	}

	// A client's pause stays, and is dropped after the paused TTL.
	if err := u.m.Pause(ctx, "t", "box"); err != nil {
		t.Fatal(err)
	}
	if err := u.m.ReadFile(ctx, "t", "box", "/workspace/kept.txt", &b); !errors.Is(err, ErrPaused) {
		t.Errorf("read of a sandbox a client paused: %v, want ErrPaused", err)
	}
	u.clock.Advance(time.Hour + time.Second)
	u.live.pauseDue(ctx)
	u.table.Reap()
	if _, err := u.m.Sandbox("t", "box"); !errors.Is(err, ErrNotFound) {
		t.Errorf("past its paused TTL: %v, want ErrNotFound", err)
	}
}
