//go:build linux

package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// gated is a script that holds its stdin unread until it gets SIGUSR1, then
// runs then. It says "ready" once the signal is handled. then runs with
// SIGUSR1 ignored: Signal sends it to the process's group and then to the
// process, which may have moved on to then in between.
func gated(then string) string {
	return `trap 'go=1' USR1; echo ready; while [ -z "$go" ]; do sleep 0.05; done; trap '' USR1; ` + then
}

// persistent is req as a live sandbox starts its processes: one ending
// kills no other.
func persistent(req StartRequest) StartRequest {
	req.Persistent = true
	return req
}

// waitStalled waits until a write to p holds a full window unacknowledged
// and waits for more credit: the process does not read.
func waitStalled(t *testing.T, p *Process) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	f := &p.in
	f.mu.Lock()
	defer f.mu.Unlock()
	for !f.busy || f.unacked < StdinWindow {
		if err := f.wait(ctx, 0); err != nil {
			t.Fatalf("no write to process %d stalled: %v", p.id, err)
		}
	}
}

type writeResult struct {
	n   int
	err error
	at  time.Time
}

// writeAsync writes b to p's stdin from a goroutine of its own.
func writeAsync(ctx context.Context, p *Process, b []byte) <-chan writeResult {
	ch := make(chan writeResult, 1)
	go func() {
		n, err := p.WriteStdinContext(ctx, b)
		ch <- writeResult{n, err, time.Now()}
	}()
	return ch
}

// TestLocalStdinStalled: a process that does not read its stdin while the
// host writes 1 MiB to it stalls that write only. Meanwhile signals,
// another process's output and stdin, file operations (and on a terminal a
// resize) all work; the write completes once the process reads, and the
// process gets every byte in order.
func TestLocalStdinStalled(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  StartRequest
	}{
		// The close is queued behind the megabyte: sha256sum reads to
		// its end.
		{"pipe", sh(gated("exec sha256sum"))},
		// Raw: every byte is taken as it is, none is a control character.
		{"pty", ptyReq("stty raw -echo; "+gated("head -c 1048576 | sha256sum"), PTYSize{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, _ := startLocal(t)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			tty := tc.req.PTY != nil
			tc.req.Stdin = !tty
			s := newStream()
			p, err := l.Start(ctx, persistent(tc.req), s)
			if err != nil {
				t.Fatal(err)
			}
			s.waitFor(t, "ready", 1)

			data := make([]byte, 1<<20)
			rand.Read(data)
			sum := sha256.Sum256(data)
			wrote := writeAsync(ctx, p, data)
			waitStalled(t, p)

			// A second writer waits for its turn behind the first and
			// gives up with its context.
			gone, stop := context.WithCancel(ctx)
			stop()
			if n, err := p.WriteStdinContext(gone, []byte("never")); n != 0 || !errors.Is(err, context.Canceled) {
				t.Errorf("a second write with its context done: %d, %v", n, err)
			}
			if !tty {
				// Queued behind the megabyte, without waiting for it.
				if err := p.CloseStdin(); err != nil {
					t.Fatal(err)
				}
				if _, err := p.WriteStdinContext(ctx, []byte("late")); !errors.Is(err, ErrStdinClosed) {
					t.Errorf("write after close: %v, want ErrStdinClosed", err)
				}
			}

			stalledStdinMeanwhile(t, l, p, tty)
			select {
			case r := <-wrote:
				t.Fatalf("the write ended while nothing read it: %d bytes, %v", r.n, r.err)
			default:
			}

			released := time.Now()
			if err := p.Signal(ctx, syscall.SIGUSR1); err != nil {
				t.Fatal(err)
			}
			r := <-wrote
			if r.err != nil || r.n != len(data) {
				st, err := p.Wait(ctx)
				t.Fatalf("write: %d bytes, %v (the process: %+v %v, output %q)", r.n, r.err, st, err, s.String())
			}
			if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
				t.Fatalf("exit: %+v %v (output %q)", st, err, s.String())
			}
			// The last line: before it a shell on a terminal reports
			// the sleep that SIGUSR1 ended.
			lines := strings.Split(strings.TrimSpace(s.String()), "\n")
			if got, want := lines[len(lines)-1], hex.EncodeToString(sum[:])+"  -"; got != want {
				t.Errorf("the process read %q (output %q), want %q", got, s.String(), want)
			}
			t.Logf("1 MiB through a %d KiB window: the write returned %v after the process began to read",
				StdinWindow>>10, r.at.Sub(released).Round(time.Millisecond))
		})
	}
}

// stalledStdinMeanwhile checks that the control stream works while p's
// stdin is stalled.
func stalledStdinMeanwhile(t *testing.T, l *Local, p *Process, tty bool) {
	t.Helper()
	ctx := t.Context()
	// Another process's output.
	if out, st := run(t, l, persistent(sh("echo other"))); out.stdout.String() != "other\n" || st.Code != 0 {
		t.Errorf("another process: %+v %q", st, out.stdout.String())
	}
	// Another process's stdin.
	cat := newStream()
	q, err := l.Start(ctx, persistent(StartRequest{Argv: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: true}), cat)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.WriteStdin([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	cat.waitFor(t, "hello\n", 1)
	if err := q.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := q.Wait(ctx); err != nil || st.Code != 0 {
		t.Errorf("cat: %+v %v", st, err)
	}
	// A file operation.
	if err := l.WriteFile(ctx, "/workspace/f", 0o644, strings.NewReader("file")); err != nil {
		t.Fatal(err)
	}
	if e, err := l.Stat(ctx, "/workspace/f"); err != nil || e.Size != 4 {
		t.Errorf("stat: %+v %v", e, err)
	}
	var b bytes.Buffer
	if err := l.ReadFile(ctx, "/workspace/f", &b); err != nil || b.String() != "file" {
		t.Errorf("read: %q %v", b.String(), err)
	}
	// A signal.
	r, err := l.Start(ctx, persistent(StartRequest{Argv: []string{"/bin/sleep", "30"}, Dir: "/workspace"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st, err := r.Wait(ctx); err != nil || st.Signal != int(syscall.SIGTERM) {
		t.Errorf("SIGTERM: %+v %v", st, err)
	}
	// The stalled process's own terminal.
	if tty {
		if err := p.Resize(ctx, 100, 40); err != nil {
			t.Errorf("resize: %v", err)
		}
	}
}

// TestLocalStdinEnds: writes to a stdin that takes nothing more end at
// once, with an error that says why, and never hang.
func TestLocalStdinEnds(t *testing.T) {
	l, _ := startLocal(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	start := func(script string, stdin bool) (*Process, *stream) {
		t.Helper()
		s := newStream()
		req := persistent(sh(script))
		req.Stdin = stdin
		p, err := l.Start(ctx, req, s)
		if err != nil {
			t.Fatal(err)
		}
		return p, s
	}
	big := make([]byte, 1<<20)

	// A process that has ended.
	p, _ := start("exit 0", true)
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := p.WriteStdinContext(ctx, []byte("x")); n != 0 || !errors.Is(err, ErrStdinEnded) {
		t.Errorf("write to an ended process: %d, %v", n, err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Errorf("close the stdin of an ended process: %v", err)
	}

	// A process that ends while a write waits for it: the write ends with
	// it. sleep holds its stdin and never reads it.
	p, s := start(`echo ready; exec sleep 30`, true)
	s.waitFor(t, "ready", 1)
	wrote := writeAsync(ctx, p, big)
	waitStalled(t, p)
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := <-wrote; r.n == len(big) || !errors.Is(r.err, ErrStdinEnded) {
		t.Errorf("write pending at the end: %d bytes, %v", r.n, r.err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// A process that closes its stdin and lives on.
	p, s = start(`exec 0<&-; echo closed; exec sleep 30`, true)
	s.waitFor(t, "closed", 1)
	if _, err := p.WriteStdinContext(ctx, big); !errors.Is(err, ErrStdinEnded) || !errors.Is(err, syscall.EPIPE) {
		t.Errorf("write to a closed stdin: %v, want ErrStdinEnded and EPIPE", err)
	}
	select {
	case <-p.Done():
		t.Error("the process ended")
	default:
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}

	// A process without stdin.
	p, s = start(`echo ready; exec sleep 30`, false)
	s.waitFor(t, "ready", 1)
	if err := p.WriteStdin([]byte("x")); !errors.Is(err, ErrNoStdin) {
		t.Errorf("write to no stdin: %v", err)
	}
	if err := p.CloseStdin(); !errors.Is(err, ErrNoStdin) {
		t.Errorf("close no stdin: %v", err)
	}
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLocalStdinWriters: several writers at once, as several clients of a
// live sandbox write: each call's bytes reach the process together, each
// writer's calls in its order, nothing lost.
func TestLocalStdinWriters(t *testing.T) {
	l, _ := startLocal(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var out output
	p, err := l.Start(ctx, persistent(StartRequest{Argv: []string{"cat"}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/workspace", Stdin: true}), &out)
	if err != nil {
		t.Fatal(err)
	}
	const writers, calls, size = 6, 12, 100 << 10 // a call spans frames and windows
	block := func(w, c int) []byte {
		head := fmt.Sprintf("<%d.%d>", w, c)
		return append([]byte(head), bytes.Repeat([]byte{byte('a' + w)}, size-len(head))...)
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for c := range calls {
				if err := p.WriteStdin(block(w, c)); err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("cat: %+v %v", st, err)
	}
	got := out.stdout.Bytes()
	if len(got) != writers*calls*size {
		t.Fatalf("cat wrote %d bytes, want %d", len(got), writers*calls*size)
	}
	next := make([]int, writers)
	for i := 0; i < len(got); i += size {
		var w, c int
		if _, err := fmt.Sscanf(string(got[i:i+12]), "<%d.%d>", &w, &c); err != nil || w < 0 || w >= writers {
			t.Fatalf("at %d: %q", i, got[i:i+12])
		}
		if c != next[w] || !bytes.Equal(got[i:i+size], block(w, c)) {
			t.Fatalf("at %d: block %d.%d, want %d.%d whole", i, w, c, w, next[w])
		}
		next[w]++
	}
}

// TestStdinCreditCapped: an agent that acknowledges more than it got, or a
// negative count (a broken or hostile one), cannot make the host send past
// the window; a lost stream releases the writer.
func TestStdinCreditCapped(t *testing.T) {
	toHost, agentOut := io.Pipe()
	agentIn, fromHost := io.Pipe()
	c := NewClient(toHost, fromHost, nil)
	defer agentIn.Close()
	got := make(chan int, 64) // the bytes of stdin the agent has read, after each frame
	go func() {
		defer agentOut.Close()
		hello, _ := json.Marshal(Hello{Version: Version})
		_ = writeFrame(agentOut, msgHello, 0, hello)
		start, _, err := readFrame(agentIn, nil)
		if err != nil {
			return
		}
		// Before the answer, so the client has them before Start returns.
		_ = writeFrame(agentOut, msgStdinAck, start.id, []byte(`{"bytes":-5}`))
		_ = writeFrame(agentOut, msgStdinAck, start.id, []byte(`{"bytes":1099511627776}`))
		_ = writeFrame(agentOut, msgStarted, start.id, []byte(`{"pid":7}`))
		var buf []byte
		n := 0
		for {
			var f frame
			if f, buf, err = readFrame(agentIn, buf); err != nil {
				return
			}
			if f.typ == msgStdin {
				n += len(f.payload)
				got <- n
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	p, err := c.Start(ctx, StartRequest{Argv: []string{"x"}, Stdin: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wrote := writeAsync(ctx, p, make([]byte, 1<<20))
	// Stalled: without a cap on the credit the host would send it all.
	waitStalled(t, p)
	for n := 0; n < StdinWindow; {
		select {
		case n = <-got:
		case <-ctx.Done():
			t.Fatalf("the agent read %d bytes of the window", n)
		}
	}
	select {
	case r := <-wrote:
		t.Fatalf("the write ended unacknowledged: %d bytes, %v", r.n, r.err)
	case n := <-got:
		t.Fatalf("the host sent %d bytes unacknowledged, past the window, %d", n, StdinWindow)
	default:
	}
	agentOut.Close()
	if r := <-wrote; r.n != StdinWindow || !errors.Is(r.err, ErrLost) {
		t.Errorf("write when the stream is lost: %d bytes, %v", r.n, r.err)
	}
}
