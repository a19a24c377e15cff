// Package runtimetest is the conformance suite every runtime.Runtime passes:
// processes and their output, exit codes and signals, files, the limits and
// the kernel facts they produce, usage readings (usage.go), kill, update,
// and cleanup after a crash; terminals, live file operations and watches
// (live.go).
package runtimetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
)

// Env is what the suite needs besides the runtime.
type Env struct {
	// Rootfs and Mounts are the image sandboxes run on (an images.Image's).
	Rootfs string
	Mounts []runtime.Mount
	// NoLeftovers reports what of the sandbox with this id is still on the
	// host (mounts, cgroups, processes, directories); empty means nothing.
	NoLeftovers func(id string) []string
	// PidsAccounted is false for runtimes whose pids limit is not visible
	// in the host cgroup (gVisor keeps its tasks inside the sentry).
	PidsAccounted bool
}

// Output collects a process's output.
type Output struct {
	mu                     sync.Mutex
	stdout, stderr, status bytes.Buffer
}

func (o *Output) Stdout(p []byte) { o.mu.Lock(); o.stdout.Write(p); o.mu.Unlock() }
func (o *Output) Stderr(p []byte) { o.mu.Lock(); o.stderr.Write(p); o.mu.Unlock() }
func (o *Output) Status(p []byte) { o.mu.Lock(); o.status.Write(p); o.mu.Unlock() }

// String returns the collected stdout.
func (o *Output) String() string { o.mu.Lock(); defer o.mu.Unlock(); return o.stdout.String() }

// ErrString returns the collected stderr.
func (o *Output) ErrString() string { o.mu.Lock(); defer o.mu.Unlock(); return o.stderr.String() }

var defaultLimits = runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 128, DiskBytes: 64 << 20}

func create(t *testing.T, rt runtime.Runtime, env Env, l runtime.Limits) runtime.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	sb, err := rt.Create(ctx, runtime.Spec{Rootfs: env.Rootfs, Mounts: env.Mounts, Limits: l})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

var baseEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", "LANG=C.UTF-8"}

// Exec runs argv in sb and returns its exit status and output.
func Exec(t *testing.T, sb runtime.Sandbox, argv ...string) (agent.ExitStatus, *Output) {
	t.Helper()
	return ExecReq(t, sb, agent.StartRequest{Argv: argv})
}

// ExecReq runs req (env and dir defaulted) and waits up to a minute.
func ExecReq(t *testing.T, sb runtime.Sandbox, req agent.StartRequest) (agent.ExitStatus, *Output) {
	t.Helper()
	st, out, err := execReq(t, sb, req)
	if err != nil {
		t.Fatalf("wait %v: %v (stderr %q)", req.Argv, err, out.ErrString())
	}
	return st, out
}

// ExecMayDie runs argv where the sandbox itself may die (gVisor's sentry is
// killed as a whole when the sandbox exceeds its memory limit).
func ExecMayDie(t *testing.T, sb runtime.Sandbox, argv ...string) (agent.ExitStatus, *Output, error) {
	t.Helper()
	st, out, err := execReq(t, sb, agent.StartRequest{Argv: argv})
	if err != nil && !errors.Is(err, agent.ErrLost) {
		t.Fatalf("wait %v: %v", argv, err)
	}
	return st, out, err
}

func execReq(t *testing.T, sb runtime.Sandbox, req agent.StartRequest) (agent.ExitStatus, *Output, error) {
	t.Helper()
	if req.Env == nil {
		req.Env = baseEnv
	}
	if req.Dir == "" {
		req.Dir = "/workspace"
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := &Output{}
	p, err := sb.Agent().Start(ctx, req, out)
	if err != nil {
		t.Fatalf("start %v: %v", req.Argv, err)
	}
	st, err := p.Wait(ctx)
	return st, out, err
}

// Run runs the suite against rt.
func Run(t *testing.T, rt runtime.Runtime, env Env) {
	live(t, rt, env)
	t.Run("Pause", func(t *testing.T) {
		t.Parallel()
		Pause(t, rt, env)
	})
	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		Usage(t, rt, env)
	})
	t.Run("OutputAndExit", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		st, out := Exec(t, sb, "sh", "-c", "echo out; echo err >&2; exit 7")
		if st.Code != 7 || st.Signal != 0 {
			t.Errorf("status = %+v, want code 7", st)
		}
		if out.String() != "out\n" || out.ErrString() != "err\n" {
			t.Errorf("stdout %q stderr %q", out.String(), out.ErrString())
		}
		st, _ = Exec(t, sb, "sh", "-c", "kill -9 $$")
		if st.Signal != int(syscall.SIGKILL) {
			t.Errorf("status = %+v, want signal 9", st)
		}
	})

	t.Run("StdinStatusAndFiles", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		ctx := t.Context()
		if err := sb.Agent().WriteFile(ctx, "/workspace/dir/a.txt", 0o600, strings.NewReader("hello file")); err != nil {
			t.Fatalf("write file: %v", err)
		}
		_, out := Exec(t, sb, "sh", "-c", "cat /workspace/dir/a.txt; stat -c %a /workspace/dir/a.txt")
		if out.String() != "hello file600\n" {
			t.Errorf("file read back as %q", out.String())
		}
		for _, bad := range []string{"/etc/passwd", "/workspace/../etc/x", "relative", "/usr/bin/x"} {
			if err := sb.Agent().WriteFile(ctx, bad, 0o644, strings.NewReader("x")); err == nil {
				t.Errorf("write to %q succeeded", bad)
			}
		}
		out = &Output{}
		p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: []string{"sh", "-c", "tr a-z A-Z; printf compile_error >&3"},
			Env: baseEnv, Dir: "/workspace", Stdin: true, StatusFD: true}, out)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.WriteStdin([]byte("shout")); err != nil {
			t.Fatal(err)
		}
		if err := p.CloseStdin(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if out.String() != "SHOUT" || out.status.String() != "compile_error" {
			t.Errorf("stdout %q status %q", out.String(), out.status.String())
		}
	})

	t.Run("OnlyStdioInherited", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		_, out := Exec(t, sb, "sh", "-c", "ls /proc/self/fd | sort -n | tr '\\n' ' '")
		// ls itself opens the directory it lists: fd 3.
		if got := strings.TrimSpace(out.String()); got != "0 1 2 3" {
			t.Errorf("open fds at start: %q, want 0 1 2 (and ls's own 3)", got)
		}
	})

	t.Run("LeftoversReaped", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		st, _ := Exec(t, sb, "sh", "-c", "sleep 1000 & (setsid sleep 1000 &) ; echo started")
		if st.Reaped < 2 {
			t.Errorf("reaped %d processes, want the 2 sleeps", st.Reaped)
		}
		_, out := Exec(t, sb, "sh", "-c", "for p in /proc/[0-9]*; do cat $p/comm; done | grep -c sleep || true")
		if strings.TrimSpace(out.String()) != "0" {
			t.Errorf("sleeps still running: %q", out.String())
		}
	})

	t.Run("MemoryLimitOOM", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, runtime.Limits{MemoryBytes: 64 << 20, CPUCores: 1, Pids: 128, DiskBytes: 64 << 20})
		st, _, err := ExecMayDie(t, sb, "python3", "-c", "b = bytearray(256 << 20); print(len(b))")
		if err == nil && st.Code == 0 {
			t.Fatalf("256 MB allocation under a 64 MB limit exited 0")
		}
		stats, err := sb.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if stats.OOMKills < 1 {
			t.Errorf("OOMKills = %d, want ≥ 1 (stats %+v, status %+v)", stats.OOMKills, stats, st)
		}
		// The kernel may charge a page or a few past the limit on its way
		// to the OOM kill (seen here: 4 KiB over, on gVisor's host cgroup).
		if stats.PeakMemoryBytes < 32<<20 || stats.PeakMemoryBytes > 64<<20+256<<10 {
			t.Errorf("peak memory %d, want near the 64 MB limit", stats.PeakMemoryBytes)
		}
	})

	t.Run("PidsLimit", func(t *testing.T) {
		t.Parallel()
		if !env.PidsAccounted {
			t.Skip("this runtime keeps its tasks out of the host pids cgroup")
		}
		sb := create(t, rt, env, runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 32, DiskBytes: 64 << 20})
		Exec(t, sb, "sh", "-c", "for i in $(seq 64); do sleep 5 & done; wait")
		stats, err := sb.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if stats.PidsLimitHits < 1 {
			t.Errorf("PidsLimitHits = %d, want ≥ 1", stats.PidsLimitHits)
		}
	})

	t.Run("DiskLimit", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, runtime.Limits{MemoryBytes: 256 << 20, CPUCores: 1, Pids: 128, DiskBytes: 32 << 20})
		st, out := Exec(t, sb, "sh", "-c", "dd if=/dev/zero of=/workspace/big bs=1M count=100 2>&1; echo; dd if=/dev/zero of=/tmp/big bs=1M count=10 2>&1")
		if st.Code == 0 {
			t.Errorf("writing 110 MB to a 32 MB disk succeeded")
		}
		if !strings.Contains(out.String(), "No space left on device") {
			t.Errorf("no ENOSPC in %q", out.String())
		}
		stats, err := sb.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if !stats.DiskFull {
			t.Errorf("DiskFull = false after filling the disk")
		}
	})

	t.Run("KillEndsEverything", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		out := &Output{}
		p, err := sb.Agent().Start(t.Context(), agent.StartRequest{Argv: []string{"sleep", "1000"}, Env: baseEnv, Dir: "/"}, out)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := sb.Kill(t.Context()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := p.Wait(ctx); !errors.Is(err, agent.ErrLost) {
			t.Errorf("after Kill, Wait = %v, want ErrLost", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("kill took %v", d)
		}
	})

	t.Run("UpdateLimits", func(t *testing.T) {
		t.Parallel()
		high := runtime.Limits{MemoryBytes: 512 << 20, CPUCores: 1, Pids: 128, DiskBytes: 64 << 20}
		low := runtime.Limits{MemoryBytes: 96 << 20, CPUCores: 0.5, Pids: 64}
		sb := create(t, rt, env, high)

		// Down, below what the sandbox holds: without swap the kernel cannot
		// take a live program's 160 MB back, so Update refuses, changes
		// nothing, and the sandbox goes on under its old limits.
		h := HoldMemory(t, sb, 160)
		if err := sb.Update(t.Context(), low); !isBelowUsage(err, low.MemoryBytes) {
			t.Fatalf("lowering the memory limit to 96 MB under 160 MB held: %v, want a *runtime.LimitBelowUsageError for 96 MB", err)
		}
		if st, out, err := h.Grow(t, 160); err != nil || st.Code != 0 || out != "held\ngrew\n" {
			t.Fatalf("growing to 320 MB after the refused update: %+v %v %q: the old 512 MB limit is not in force", st, err, out)
		}
		if env.PidsAccounted {
			// About 100 tasks with the agent's threads: within the old 128,
			// not the refused 64.
			Exec(t, sb, "sh", "-c", "for i in $(seq 90); do sleep 1 & done; wait")
			stats, err := sb.Stats(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if stats.PidsLimitHits > 0 {
				t.Errorf("%d forks refused after the refused update: its pids limit was applied", stats.PidsLimitHits)
			}
		}

		// Down once the programs are gone. Their memory is free at once on
		// runc; gVisor's Sentry hands it back to the host in the background,
		// and until then Update refuses exactly as above.
		for refused, deadline := 0, time.Now().Add(30*time.Second); ; refused++ {
			err := sb.Update(t.Context(), low)
			if err == nil {
				t.Logf("lowered after %d refusals", refused)
				break
			}
			if !isBelowUsage(err, low.MemoryBytes) {
				t.Fatalf("lowering the memory limit with no program running: %v", err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("30 s after its programs ended the sandbox still holds too much: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := sb.ResetStats(t.Context()); err != nil {
			t.Fatal(err)
		}
		alloc := "b = bytearray(160 << 20); print('ok')"
		if st, _, err := ExecMayDie(t, sb, "python3", "-c", alloc); err == nil && st.Code == 0 {
			t.Errorf("160 MB under an updated 96 MB limit succeeded")
		}
		stats, err := sb.Stats(t.Context())
		if err != nil {
			t.Fatalf("stats after the lowered limit: %v", err)
		}
		if stats.PeakMemoryBytes > low.MemoryBytes {
			t.Errorf("peak %d above the updated limit", stats.PeakMemoryBytes)
		}

		// And up: raising a limit must work as well as lowering it (in v1,
		// memory+swap has to grow first). A fresh sandbox: on gVisor the
		// OOM kill above ends the sandbox.
		small := create(t, rt, env, runtime.Limits{MemoryBytes: 96 << 20, CPUCores: 0.5, Pids: 64, DiskBytes: 64 << 20})
		if err := small.Update(t.Context(), runtime.Limits{MemoryBytes: 512 << 20, CPUCores: 1, Pids: 128}); err != nil {
			t.Fatal(err)
		}
		if st, out := Exec(t, small, "python3", "-c", alloc); st.Code != 0 {
			t.Errorf("160 MB after raising a 96 MB limit to 512 MB failed: %+v %s", st, out.ErrString())
		}
	})

	t.Run("DestroyLeavesNothing", func(t *testing.T) {
		t.Parallel()
		sb, err := rt.Create(t.Context(), runtime.Spec{Rootfs: env.Rootfs, Mounts: env.Mounts, Limits: defaultLimits})
		if err != nil {
			t.Fatal(err)
		}
		Exec(t, sb, "sh", "-c", "sleep 1000 & echo x > /workspace/x")
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Errorf("second destroy: %v", err)
		}
		if left := env.NoLeftovers(sb.ID()); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
}

// isBelowUsage reports whether err is Update's refusal to lower the memory
// limit to limit.
func isBelowUsage(err error, limit int64) bool {
	var below *runtime.LimitBelowUsageError
	return errors.As(err, &below) && errors.Is(err, runtime.ErrLimitBelowUsage) && below.Limit == limit
}

// Holder is a python process in a sandbox that keeps memory allocated.
type Holder struct {
	p   *agent.Process
	out *notifyOutput
}

// notifyOutput is an Output that signals each write to stdout.
type notifyOutput struct {
	Output
	wrote chan struct{}
}

func (o *notifyOutput) Stdout(p []byte) {
	o.Output.Stdout(p)
	select {
	case o.wrote <- struct{}{}:
	default:
	}
}

// HoldMemory starts a process in sb that writes mb MiB and keeps them, and
// returns once it holds them.
func HoldMemory(t *testing.T, sb runtime.Sandbox, mb int) *Holder {
	t.Helper()
	// bytearray(n) is zero-filled: every page is written, so every page
	// is charged.
	code := fmt.Sprintf("import sys\nheld = bytearray(%d << 20)\nprint('held', flush=True)\n"+
		"more = bytearray(int(sys.stdin.read() or 0) << 20)\nprint('grew', flush=True)\n", mb)
	h := &Holder{out: &notifyOutput{wrote: make(chan struct{}, 1)}}
	var err error
	h.p, err = sb.Agent().Start(t.Context(), agent.StartRequest{Argv: []string{"python3", "-c", code},
		Env: baseEnv, Dir: "/workspace", Stdin: true}, h.out)
	if err != nil {
		t.Fatalf("start the holder: %v", err)
	}
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for h.out.String() != "held\n" {
		select {
		case <-h.out.wrote:
		case <-h.p.Done():
			st, err := h.p.Wait(t.Context())
			t.Fatalf("the holder of %d MiB ended: %+v %v %q", mb, st, err, h.out.ErrString())
		case <-deadline.C:
			t.Fatalf("the holder of %d MiB did not report within a minute: %q %q", mb, h.out.String(), h.out.ErrString())
		}
	}
	return h
}

// Grow has the holder write mb MiB more and exit, and returns how it
// ended and its stdout.
func (h *Holder) Grow(t *testing.T, mb int) (agent.ExitStatus, string, error) {
	t.Helper()
	if err := h.p.WriteStdin([]byte(strconv.Itoa(mb))); err != nil {
		return agent.ExitStatus{}, "", err
	}
	if err := h.p.CloseStdin(); err != nil {
		return agent.ExitStatus{}, "", err
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := h.p.Wait(ctx)
	return st, h.out.String(), err
}

// Wait waits up to d for the holder to end (its sandbox destroyed, say).
func (h *Holder) Wait(t *testing.T, d time.Duration) (agent.ExitStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	return h.p.Wait(ctx)
}

// HangingChild is the body of a helper process for ReapAfterCrash: it
// creates a sandbox, prints its id and waits to be killed.
func HangingChild(rt runtime.Runtime, env Env) {
	sb, err := rt.Create(context.Background(), runtime.Spec{Rootfs: env.Rootfs, Mounts: env.Mounts, Limits: defaultLimits})
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString(sb.ID() + "\n")
	select {}
}
