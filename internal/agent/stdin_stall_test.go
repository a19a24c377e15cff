//go:build linux

package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLocalStdinNotReading: a write bounded by a stall ends with
// ErrNotReading when the process takes none of its stdin for that long,
// saying how many bytes it sent; a second write ends at once with none
// sent; the process, once it reads, gets exactly the bytes sent, in order.
func TestLocalStdinNotReading(t *testing.T) {
	l, _ := startLocal(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s := newStream()
	req := persistent(sh(gated("exec sha256sum")))
	req.Stdin = true
	p, err := l.Start(ctx, req, s)
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "ready", 1)

	const stall = 300 * time.Millisecond
	data := make([]byte, 4<<20)
	rand.Read(data)
	n, err := p.WriteStdinWithin(ctx, data, stall)
	if !errors.Is(err, ErrNotReading) || n < StdinWindow || n >= len(data) {
		t.Fatalf("a write to a process that does not read: %d bytes, %v; want ErrNotReading after a window or more", n, err)
	}
	if m, err := p.WriteStdinWithin(ctx, []byte("more"), stall); m != 0 || !errors.Is(err, ErrNotReading) {
		t.Errorf("a second write: %d bytes, %v; want none and ErrNotReading", m, err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if st, err := p.Wait(ctx); err != nil || st.Code != 0 {
		t.Fatalf("exit: %+v %v (output %q)", st, err, s.String())
	}
	sum := sha256.Sum256(data[:n])
	lines := strings.Split(strings.TrimSpace(s.String()), "\n")
	if got, want := lines[len(lines)-1], hex.EncodeToString(sum[:])+"  -"; got != want {
		t.Errorf("the process read %q, want the sum of the first %d bytes, %q", got, n, want)
	}
}

// TestLocalStdinSlowReader: a process that reads slowly but steadily is not
// "not reading": a bounded write that takes longer than its bound
// completes, because every acknowledgement starts the bound again.
func TestLocalStdinSlowReader(t *testing.T) {
	l, _ := startLocal(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// 16 KiB, then a pause of 0.05 s: 320 KiB/s at most, so the 1 MiB
	// past the window and the pipe's buffer take 3 s or more, past the
	// bound, while the reader takes some every 0.05 s or so, and far
	// more often than the bound even when the machine is loaded (each
	// round forks three processes; a bound of 0.5 s was missed under a
	// loaded test lane).
	req := persistent(sh(`while [ "$(head -c 16384 | wc -c)" -gt 0 ]; do sleep 0.05; done`))
	req.Stdin = true
	p, err := l.Start(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, StdinWindow+1<<20)
	const stall = 2 * time.Second
	start := time.Now()
	if n, err := p.WriteStdinWithin(ctx, data, stall); n != len(data) || err != nil {
		t.Fatalf("a write to a slow reader: %d of %d bytes, %v", n, len(data), err)
	}
	t.Logf("%d KiB to a reader of 320 KiB/s at most, bound %v: %v", len(data)>>10, stall, time.Since(start).Round(time.Millisecond))
	if err := p.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}
