//go:build linux

package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stream collects a process's output and tells waiters when more came.
type stream struct {
	mu   sync.Mutex
	out  strings.Builder
	errs strings.Builder
	more chan struct{}
}

func newStream() *stream { return &stream{more: make(chan struct{}, 1)} }

func (s *stream) Stdout(p []byte) { s.mu.Lock(); s.out.Write(p); s.mu.Unlock(); s.poke() }
func (s *stream) Stderr(p []byte) { s.mu.Lock(); s.errs.Write(p); s.mu.Unlock(); s.poke() }
func (s *stream) Status([]byte)   {}

func (s *stream) poke() {
	select {
	case s.more <- struct{}{}:
	default:
	}
}

func (s *stream) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.out.String() }

// waitFor waits until stdout holds want count times.
func (s *stream) waitFor(t *testing.T, want string, count int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for strings.Count(s.String(), want) < count {
		select {
		case <-s.more:
		case <-ctx.Done():
			t.Fatalf("stdout %q has not %d× %q", s.String(), count, want)
		}
	}
}

func ptyReq(script string, sz PTYSize) StartRequest {
	req := sh(script)
	req.PTY = &sz
	return req
}

// TestLocalPTY: a process started with a PTY runs on a terminal that is its
// controlling one, of the size asked, following resizes; what is typed
// reaches it and ^D ends its input.
func TestLocalPTY(t *testing.T) {
	l, _ := startLocal(t)
	ctx := t.Context()

	// A terminal, the controlling one (/dev/tty opens only then), of the
	// size asked; stderr is the terminal too.
	out, st := run(t, l, ptyReq(`tty; stty size; exec 3</dev/tty && echo ctty; echo err >&2; cut -d" " -f6 /proc/$$/stat; echo $$`, PTYSize{Cols: 100, Rows: 30}))
	lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(out.stdout.String(), "\r\n", "\n")), "\n")
	if st.Code != 0 || len(lines) != 6 || !strings.HasPrefix(lines[0], "/dev/pts/") || lines[1] != "30 100" ||
		lines[2] != "ctty" || lines[3] != "err" || strings.TrimSpace(lines[4]) != lines[5] || out.stderr.Len() != 0 {
		t.Errorf("under a PTY: %+v, stdout %q, stderr %q", st, out.stdout.String(), out.stderr.String())
	}
	// Zero is 80×24.
	if out, _ := run(t, l, ptyReq("stty size", PTYSize{})); strings.TrimSpace(out.stdout.String()) != "24 80" {
		t.Errorf("default size: %q", out.stdout.String())
	}

	// A resize reaches the running process.
	s := newStream()
	p, err := l.Start(ctx, ptyReq(`read a; stty size; read b; stty size`, PTYSize{Cols: 80, Rows: 24}), s)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "24 80", 1)
	if err := p.Resize(ctx, 132, 43); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("resized: %+v %v", st, err)
	}
	if got := s.String(); !strings.HasSuffix(got, "43 132\r\n") || !strings.Contains(got, "one\r\n") {
		t.Errorf("after a resize: %q", got)
	}
	if err := p.Resize(ctx, 10, 10); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("resizing an ended process: %v, want ESRCH", err)
	}

	// Stdin round trip through cat: echoed by the terminal, then cat's;
	// closing stdin types ^D, and cat ends.
	s = newStream()
	p, err = l.Start(ctx, StartRequest{Argv: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", PTY: &PTYSize{}}, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.WriteStdin([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "hello\r\n", 2)
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Errorf("cat after ^D: %+v %v (output %q)", st, err, s.String())
	}

	// A signal reaches the terminal's session.
	p, err = l.Start(ctx, ptyReq("sleep 30", PTYSize{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Signal != int(syscall.SIGTERM) {
		t.Errorf("SIGTERM under a PTY: %+v %v", st, err)
	}
}

func TestLocalPTYRefused(t *testing.T) {
	l, _ := startLocal(t)
	ctx := t.Context()
	for _, req := range []StartRequest{
		{Argv: []string{"/bin/true"}, PTY: &PTYSize{}, Zygote: true},
		{Argv: []string{"/bin/true"}, PTY: &PTYSize{}, Via: 7},
	} {
		if _, err := l.Start(ctx, req, nil); !errors.Is(err, KindInvalid) {
			t.Errorf("start %+v: %v, want KindInvalid", req, err)
		}
	}
	// Only a process with a terminal has a size.
	p, err := l.Start(ctx, StartRequest{Argv: []string{"/bin/sleep", "30"}, Dir: "/workspace"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(ctx, 80, 24); !errors.Is(err, KindInvalid) {
		t.Errorf("resizing a process without a terminal: %v, want KindInvalid", err)
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Its end kills what else runs: wait for it.
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// With a status pipe beside the terminal.
	req := ptyReq("echo compile_error >&3; echo out", PTYSize{})
	req.StatusFD = true
	if out, st := run(t, l, req); out.status.String() != "compile_error\n" || out.stdout.String() != "out\r\n" || st.Code != 0 {
		t.Errorf("status fd under a PTY: %q %q %+v", out.status.String(), out.stdout.String(), st)
	}
}
