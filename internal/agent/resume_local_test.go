//go:build linux

package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startLink starts a local agent (this test binary) on a new root behind
// a Link, whose Attach replaces the host's stream the way a restore does
// while the agent runs on.
func startLink(t *testing.T) (*Link, string) {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"workspace", "tmp", "dev/shm"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := StartLink(os.Args[0], root, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() }) // the agent kills its processes and exits
	return l, root
}

// evaluator is a python process that runs each stdin line, holding its
// variables in memory; after a line "wait PATH" it prints "during" once
// PATH exists, then creates PATH.done.
const evaluator = `import os, sys, time
for line in sys.stdin:
    if line.startswith("wait "):
        path = line.split()[1]
        while not os.path.exists(path):
            time.sleep(0.01)
        print("during", flush=True)
        open(path + ".done", "w").close()
        continue
    exec(line)
    sys.stdout.flush()
`

// lineOutput signals each time stdout grows.
type lineOutput struct {
	mu     sync.Mutex
	stdout strings.Builder
	grew   chan struct{}
}

func newLineOutput() *lineOutput { return &lineOutput{grew: make(chan struct{}, 1)} }

func (o *lineOutput) Stdout(p []byte) {
	o.mu.Lock()
	o.stdout.Write(p)
	o.mu.Unlock()
	select {
	case o.grew <- struct{}{}:
	default:
	}
}
func (o *lineOutput) Stderr(p []byte) {}
func (o *lineOutput) Status(p []byte) {}

// await waits until stdout holds want.
func (o *lineOutput) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		o.mu.Lock()
		got := o.stdout.String()
		o.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		select {
		case <-o.grew:
		case <-deadline:
			t.Fatalf("stdout %q, want it to contain %q", got, want)
		}
	}
}

// awaitGone waits until process pid has ended and been reaped.
func awaitGone(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still there", pid)
		}
	}
}

// awaitFile waits for path to exist.
func awaitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

func startEvaluator(t *testing.T, c *Client, out Output) *Process {
	t.Helper()
	p, err := c.Start(t.Context(), StartRequest{Argv: []string{"/usr/bin/python3", "-u", "-c", evaluator},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: true, Persistent: true}, out)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResumeOnNewStream: a client suspends the agent, the stream is
// replaced, and a resumed client on the new one finds the process running
// with its memory, gets the output the process wrote while the agent was
// suspended, and numbers its requests above the old client's.
func TestResumeOnNewStream(t *testing.T) {
	r, root := startLink(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c1 := NewClient(r.Attach())
	if _, err := c1.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	out1 := newLineOutput()
	p1 := startEvaluator(t, c1, out1)
	// The line is the evaluator's, not an argument: it names the host path.
	for _, line := range []string{"x = 42\n", "print(x)\n", "wait " + root + "/tmp/go\n"} {
		if err := p1.WriteStdin([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	out1.await(t, "42\n")
	// A silent process that ends while the agent is suspended: its exit
	// waits, and the resumed client learns of it.
	quiet, err := c1.Start(ctx, StartRequest{Argv: []string{"/bin/sh", "-c", `while [ ! -e "$1" ]; do sleep 0.01; done; exit 5`, "sh", "/tmp/end"},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.List(ctx, "/workspace"); !errors.Is(err, ErrSuspended) {
		t.Fatalf("a request while suspended: %v, want ErrSuspended", err)
	}
	// The process writes while the agent is suspended: its output waits.
	if err := os.WriteFile(filepath.Join(root, "tmp", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	awaitFile(t, filepath.Join(root, "tmp", "go.done"))
	if err := os.WriteFile(filepath.Join(root, "tmp", "end"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	awaitGone(t, quiet.PID)

	c2 := NewResumedClient(r.Attach())
	t.Cleanup(func() { c2.Close() })
	h, err := c2.Ready(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Resume == nil {
		t.Fatal("the resumed hello has no state")
	}
	i := slices.IndexFunc(h.Resume.Processes, func(lp LiveProcess) bool { return lp.ID == p1.ID() })
	if i < 0 || h.Resume.Processes[i].PID != p1.PID || len(h.Resume.Processes) != 2 {
		t.Fatalf("resumed processes %+v, want id %d pid %d and the quiet one", h.Resume.Processes, p1.ID(), p1.PID)
	}
	if !slices.ContainsFunc(h.Resume.Processes, func(lp LiveProcess) bool { return lp.ID == quiet.ID() && lp.PID == quiet.PID }) {
		t.Fatalf("resumed processes %+v, want the ended one, id %d", h.Resume.Processes, quiet.ID())
	}
	if h.Resume.LastID < p1.ID() {
		t.Errorf("last id %d, below the process's %d", h.Resume.LastID, p1.ID())
	}
	// The old client lost its stream; its process handle says so.
	if _, err := p1.Wait(ctx); !errors.Is(err, ErrLost) {
		t.Errorf("old handle: %v, want ErrLost", err)
	}

	out2 := newLineOutput()
	p2, err := c2.Attach(p1.ID(), out2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Attach(p1.ID(), out2); !errors.Is(err, ErrNoProcess) {
		t.Errorf("second attach: %v, want ErrNoProcess", err)
	}
	q2, err := c2.Attach(quiet.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := q2.Wait(ctx); err != nil || st.Code != 5 {
		t.Errorf("the process that ended while suspended: %+v %v, want code 5", st, err)
	}
	out2.await(t, "during\n")
	if err := p2.WriteStdin([]byte("print(x * 2)\n")); err != nil {
		t.Fatal(err)
	}
	out2.await(t, "84\n")

	// New requests work, under ids the agent has not seen.
	out, st := run(t, &Local{Client: c2}, sh("echo fresh"))
	if out.stdout.String() != "fresh\n" || st.Code != 0 {
		t.Errorf("a new process: %q %+v", out.stdout.String(), st)
	}
	if err := p2.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := p2.Wait(ctx); err != nil || st.Code != 0 {
		t.Errorf("evaluator end: %+v %v", st, err)
	}
}

// TestResumeSameStream: after a failed checkpoint the same client resumes
// the agent, and what the process wrote meanwhile arrives.
func TestResumeSameStream(t *testing.T) {
	r, root := startLink(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := NewClient(r.Attach())
	t.Cleanup(func() { c.Close() })
	if _, err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	out := newLineOutput()
	p := startEvaluator(t, c, out)
	if err := p.WriteStdin([]byte("x = 7\nwait " + root + "/tmp/go\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Suspend(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Suspend(ctx); err != nil {
		t.Fatalf("a second suspend: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	awaitFile(t, filepath.Join(root, "tmp", "go.done"))
	out.mu.Lock()
	early := out.stdout.String()
	out.mu.Unlock()
	if early != "" {
		t.Fatalf("output %q arrived while the agent was suspended", early)
	}
	st, err := c.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Processes) != 1 || st.Processes[0].ID != p.ID() {
		t.Errorf("processes %+v, want id %d", st.Processes, p.ID())
	}
	out.await(t, "during\n")
	if err := p.WriteStdin([]byte("print(x + 1)\n")); err != nil {
		t.Fatal(err)
	}
	out.await(t, "8\n")
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Signal != int(syscall.SIGKILL) {
		t.Errorf("after kill: %+v %v", st, err)
	}
}
