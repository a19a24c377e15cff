package runtimetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
)

// evaluator is a python process that runs each line of its stdin, holding
// its variables in memory between lines.
var evaluator = []string{"python3", "-u", "-c", "import sys\nfor line in sys.stdin:\n    exec(line)\n"}

// lines is an Output that signals each write to stdout.
type lines struct {
	Output
	wrote chan struct{}
}

func newLines() *lines { return &lines{wrote: make(chan struct{}, 1)} }

func (o *lines) Stdout(p []byte) {
	o.Output.Stdout(p)
	select {
	case o.wrote <- struct{}{}:
	default:
	}
}

// await waits until p's stdout ends with want.
func (o *lines) await(t *testing.T, p *agent.Process, want string) {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	for !strings.HasSuffix(o.String(), want) {
		select {
		case <-o.wrote:
		case <-p.Done():
			st, err := p.Wait(t.Context())
			t.Fatalf("the evaluator ended (%+v, %v) with stdout %q stderr %q, want %q", st, err, o.String(), o.ErrString(), want)
		case <-deadline.C:
			t.Fatalf("stdout %q (stderr %q), want it to end with %q", o.String(), o.ErrString(), want)
		}
	}
}

// Pause pauses a sandbox with a session's workspace and resumes it.
// Every runtime keeps the files (a sandbox that is not a runtime.Pauser is
// destroyed and created again on the same Workspace); one whose sandboxes
// are Pausers keeps a process and its memory as well, and its agent takes
// up the process again. Nothing of either sandbox is left after.
func Pause(t *testing.T, rt runtime.Runtime, env Env) {
	dir := t.TempDir()
	spec := runtime.Spec{Rootfs: env.Rootfs, Mounts: env.Mounts, Limits: defaultLimits,
		Workspace: filepath.Join(dir, "disk.img")}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			sb.Destroy(context.Background())
		}
	})
	for path, text := range map[string]string{"/workspace/f": "kept\n", "/workspace/d/g": "deep\n"} {
		if err := sb.Agent().WriteFile(ctx, path, 0o644, strings.NewReader(text)); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
	}
	out := newLines()
	p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: evaluator, Env: baseEnv, Dir: "/workspace", Stdin: true, Persistent: true}, out)
	if err != nil {
		t.Fatalf("start the evaluator: %v", err)
	}
	if err := p.WriteStdin([]byte("x = 42\nprint(x)\n")); err != nil {
		t.Fatal(err)
	}
	out.await(t, p, "42\n")

	image := filepath.Join(dir, "paused")
	pauser, ok := sb.(runtime.Pauser)
	restorer, rok := rt.(runtime.Restorer)
	if !ok || !rok {
		// Files only: the sandbox goes, its Workspace image stays.
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("destroy: %v", err)
		}
		destroyed = true
		if left := env.NoLeftovers(sb.ID()); len(left) > 0 {
			t.Errorf("left behind by the paused sandbox: %v", left)
		}
		sb2, err := rt.Create(ctx, spec)
		if err != nil {
			t.Fatalf("create on the same workspace: %v", err)
		}
		checkResumedFiles(t, sb2)
		destroyAndCheck(t, sb2, env)
		if loops := loopsBacking(spec.Workspace); len(loops) > 0 {
			t.Errorf("loop devices still back the workspace image: %v", loops)
		}
		return
	}

	// Pausing a sandbox without a workspace of its own is refused, and it
	// runs on.
	plain := create(t, rt, env, defaultLimits)
	if pp, ok := plain.(runtime.Pauser); !ok {
		t.Errorf("a sandbox without a workspace is no Pauser, one with is")
	} else if err := pp.Pause(ctx, filepath.Join(dir, "plain")); !errors.Is(err, runtime.ErrNotPausable) {
		t.Errorf("pause without a workspace: %v, want ErrNotPausable", err)
	}
	if st, _ := Exec(t, plain, "true"); st.Code != 0 {
		t.Errorf("after a refused pause: %+v", st)
	}

	start := time.Now()
	if err := pauser.Pause(ctx, image); err != nil {
		t.Fatalf("pause: %v", err)
	}
	paused := time.Since(start)
	destroyed = true
	if _, err := p.Wait(ctx); !errors.Is(err, agent.ErrLost) {
		t.Errorf("the paused sandbox's process handle: %v, want ErrLost", err)
	}
	if left := env.NoLeftovers(sb.ID()); len(left) > 0 {
		t.Errorf("left behind by the paused sandbox: %v", left)
	}
	size := dirBytes(image)

	// A spec that differs in what the saved state depends on is refused.
	other := spec
	other.Workspace = filepath.Join(dir, "other.img")
	if _, err := restorer.Restore(ctx, other, image); !errors.Is(err, runtime.ErrNoImage) {
		t.Errorf("restore with another workspace: %v, want ErrNoImage", err)
	}

	start = time.Now()
	sb2, err := restorer.Restore(ctx, spec, image)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	restored := time.Since(start)
	t.Logf("pause %v, restore %v, image %.1f MiB", paused.Round(time.Millisecond), restored.Round(time.Millisecond), float64(size)/(1<<20))
	h, err := sb2.Agent().Ready(ctx)
	if err != nil || h.Resume == nil {
		t.Fatalf("restored agent: hello %+v, %v", h, err)
	}
	if !slices.ContainsFunc(h.Resume.Processes, func(lp agent.LiveProcess) bool { return lp.ID == p.ID() && lp.PID == p.PID }) {
		t.Fatalf("the restored agent runs %+v, not the evaluator (id %d, pid %d)", h.Resume.Processes, p.ID(), p.PID)
	}
	out2 := newLines()
	p2, err := sb2.Agent().Attach(p.ID(), out2)
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.WriteStdin([]byte("print(x * 2)\n")); err != nil {
		t.Fatal(err)
	}
	out2.await(t, p2, "84\n")
	checkResumedFiles(t, sb2)
	if _, err := os.Stat(image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the saved state outlived its restore: %v", err)
	}
	if _, err := restorer.Restore(ctx, spec, image); !errors.Is(err, runtime.ErrNoImage) {
		t.Errorf("a second restore: %v, want ErrNoImage", err)
	}
	if err := p2.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := p2.Wait(ctx); err != nil || st.Code != 0 {
		t.Errorf("the evaluator's end: %+v %v", st, err)
	}
	destroyAndCheck(t, sb2, env)
	if loops := loopsBacking(spec.Workspace); len(loops) > 0 {
		t.Errorf("loop devices still back the workspace image: %v", loops)
	}
}

// loopsBacking lists the loop devices whose backing file is image.
func loopsBacking(image string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == image {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}

// checkResumedFiles reads the files Pause wrote, through a process and
// the agent, and writes one.
func checkResumedFiles(t *testing.T, sb runtime.Sandbox) {
	t.Helper()
	st, out := Exec(t, sb, "cat", "/workspace/f", "/workspace/d/g")
	if st.Code != 0 || out.String() != "kept\ndeep\n" {
		t.Errorf("files after resume: %+v %q %q", st, out.String(), out.ErrString())
	}
	var b strings.Builder
	if err := sb.Agent().ReadFile(t.Context(), "/workspace/d/g", &b); err != nil || b.String() != "deep\n" {
		t.Errorf("read a file after resume: %q %v", b.String(), err)
	}
	if err := sb.Agent().WriteFile(t.Context(), "/workspace/h", 0o644, strings.NewReader("new")); err != nil {
		t.Errorf("write a file after resume: %v", err)
	}
}

func destroyAndCheck(t *testing.T, sb runtime.Sandbox, env Env) {
	t.Helper()
	if err := sb.Destroy(context.Background()); err != nil {
		t.Errorf("destroy the resumed sandbox: %v", err)
	}
	if left := env.NoLeftovers(sb.ID()); len(left) > 0 {
		t.Errorf("left behind by the resumed sandbox: %v", left)
	}
}

// dirBytes is what the regular files under dir take on disk.
func dirBytes(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}
