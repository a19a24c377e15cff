package runtimetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
)

// stalledStdinProgram holds its stdin unread, once it holds some (its pipe
// full, or on a terminal anything), until SIGUSR1; then it reads n bytes
// and prints their sha256 and count. A terminal is made raw first: every
// byte is taken as it is, none echoed.
const stalledStdinProgram = `
import fcntl, hashlib, os, signal, struct, sys, termios, time, tty
n = int(sys.argv[1])
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
if os.isatty(0):
    tty.setraw(0)
    full = 1
else:
    full = fcntl.fcntl(0, 1032)  # F_GETPIPE_SZ
print("ready", flush=True)
while struct.unpack("i", fcntl.ioctl(0, termios.FIONREAD, b"\0\0\0\0"))[0] < full:
    time.sleep(0.01)
print("stalled", flush=True)
signal.sigwait({signal.SIGUSR1})
h, got = hashlib.sha256(), 0
while got < n:
    b = os.read(0, n - got)
    if not b:
        break
    h.update(b)
    got += len(b)
print(h.hexdigest(), got, flush=True)
`

// stalledStdin holds a runtime's sandbox to a process that does not read
// its stdin while the host writes 1 MiB to it, on pipes and on a terminal:
// other processes, file operations, signals and resizes go on meanwhile,
// and once the process reads, the write completes and the process has
// every byte, in order.
func stalledStdin(t *testing.T, rt runtime.Runtime, env Env) {
	t.Run("StalledStdin", func(t *testing.T) {
		t.Parallel()
		sb := create(t, rt, env, defaultLimits)
		for _, pty := range []bool{false, true} {
			t.Run(map[bool]string{false: "Pipe", true: "Terminal"}[pty], func(t *testing.T) {
				stallStdin(t, sb, pty)
			})
		}
	})
}

func stallStdin(t *testing.T, sb runtime.Sandbox, pty bool) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	data := make([]byte, 1<<20)
	rand.Read(data)
	sum := sha256.Sum256(data)
	req := agent.StartRequest{Argv: []string{"python3", "-c", stalledStdinProgram, fmt.Sprint(len(data))},
		Env: baseEnv, Dir: "/workspace", Stdin: !pty, Persistent: true}
	if pty {
		req.PTY = &agent.PTYSize{}
	}
	out := newLiveOutput()
	p, err := sb.Agent().Start(ctx, req, out)
	if err != nil {
		t.Fatal(err)
	}
	out.p = p
	out.waitFor(t, "ready", 1)
	wrote := make(chan error, 1)
	go func() {
		_, err := p.WriteStdinContext(ctx, data)
		wrote <- err
	}()
	out.waitFor(t, "stalled", 1)

	// Another process, a file operation, a signal, a resize.
	if st, o := Exec(t, sb, "echo", "other"); st.Code != 0 || o.String() != "other\n" {
		t.Errorf("another process while stdin stalls: %+v %q", st, o.String())
	}
	if err := sb.Agent().WriteFile(ctx, "/workspace/f", 0o644, strings.NewReader("file")); err != nil {
		t.Errorf("write a file while stdin stalls: %v", err)
	}
	if e, err := sb.Agent().Stat(ctx, "/workspace/f"); err != nil || e.Size != 4 {
		t.Errorf("stat while stdin stalls: %+v %v", e, err)
	}
	sleeper, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: []string{"sleep", "60"}, Env: baseEnv, Dir: "/workspace", Persistent: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sleeper.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Errorf("signal while stdin stalls: %v", err)
	}
	if st, err := sleeper.Wait(ctx); err != nil || st.Signal != int(syscall.SIGTERM) {
		t.Errorf("SIGTERM while stdin stalls: %+v %v", st, err)
	}
	if pty {
		if err := p.Resize(ctx, 100, 40); err != nil {
			t.Errorf("resize while stdin stalls: %v", err)
		}
	}
	select {
	case err := <-wrote:
		t.Fatalf("the write ended while nothing read it: %v", err)
	default:
	}

	released := time.Now()
	if err := p.Signal(ctx, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("write: %v", err)
	}
	took := time.Since(released)
	st := out.wait(t)
	want := fmt.Sprintf("%s %d", hex.EncodeToString(sum[:]), len(data))
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(out.String(), "\r", "")), "\n")
	if st.Code != 0 || lines[len(lines)-1] != want {
		t.Errorf("pty %v: the process read %q (%+v, stderr %q), want %q", pty, out.String(), st, out.ErrString(), want)
	}
	t.Logf("pty %v: 1 MiB written %v after the process began to read", pty, took.Round(time.Millisecond))
	// Its stdin is gone with it.
	if err := p.WriteStdin([]byte("x")); !errors.Is(err, agent.ErrStdinEnded) {
		t.Errorf("pty %v: write after the end: %v", pty, err)
	}
}
