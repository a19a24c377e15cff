package live

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/sandbox"
)

// TestStdinNotReading: 4 MiB written to a process that does not read its
// stdin ends after the stall bound with ErrNotReading, saying how much was
// accepted; nothing of it is lost or doubled.
func TestStdinNotReading(t *testing.T) {
	u := newUnit(t, func(c *Config) { c.StdinStall = 300 * time.Millisecond })
	u.create(sandbox.CreateSandboxRequest{SandboxID: "box"})
	notReading(t, u.m, "box", 300*time.Millisecond)
}

// notReading checks the stdin bound on live sandbox (t, id), whose manager
// has stall as its Config.StdinStall: a write of 4 MiB to a process that
// holds its stdin unread fails with a *NotReadingError, a fault a caller
// may retry, that counts the bytes accepted (a window or more, not all); a
// second write is refused with none accepted; once the process reads, it
// gets exactly the bytes accepted, in order.
func notReading(t *testing.T, m *byID, id string, stall time.Duration) {
	t.Helper()
	ctx := t.Context()
	p, err := m.StartProcess(ctx, "t", id, sandbox.StartProcessRequest{Stdin: true,
		Shell: `echo ready; while [ ! -e go ]; do sleep 0.05; done; exec sha256sum`})
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.ProcessOutput("t", id, p.PID)
	if err != nil {
		t.Fatal(err)
	}
	waitStdout(t, out, "ready\n")

	data := make([]byte, 4<<20)
	rand.Read(data)
	began := time.Now()
	n, err := m.WriteStdin(ctx, "t", id, p.PID, bytes.NewReader(data))
	t.Logf("4 MiB to a process that does not read, bound %v: %d bytes accepted, the write ended after %v",
		stall, n, time.Since(began).Round(time.Millisecond))
	var nr *NotReadingError
	switch {
	case !errors.As(err, &nr) || !errors.Is(err, ErrNotReading):
		t.Fatalf("4 MiB to a process that does not read: %d bytes, %v; want a NotReadingError", n, err)
	case nr.Written != n || n < agent.StdinWindow || n >= int64(len(data)) || nr.Stall != stall:
		t.Fatalf("written %d, error %+v; want a window or more, not all, the count in the error and the bound %v", n, nr, stall)
	}
	f := fault.Of(err)
	if f.Kind != fault.ResourceExhausted || f.Code != "process_not_reading" || f.RetryAfter <= 0 ||
		!strings.Contains(f.Message, fmt.Sprintf("first %d bytes", n)) {
		t.Errorf("the fault: %+v", f)
	}
	m2, err := m.WriteStdin(ctx, "t", id, p.PID, strings.NewReader("more"))
	if !errors.As(err, &nr) || m2 != 0 || nr.Written != 0 || !strings.Contains(fault.Of(err).Message, "none of this input") {
		t.Errorf("a second write: %d bytes, %v; want none accepted", m2, err)
	}

	if _, err := m.WriteFile(ctx, "t", id, "go", strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if err := m.CloseStdin("t", id, p.PID); err != nil {
		t.Fatal(err)
	}
	info, err := m.Process(ctx, "t", id, p.PID, true)
	if err != nil || info.Exit == nil || info.Exit.ExitCode != 0 {
		t.Fatalf("the process: %+v, %v", info, err)
	}
	evs, _, _ := out.Events(0)
	sum := sha256.Sum256(data[:n])
	if got, want := stdout(evs), "ready\n"+hex.EncodeToString(sum[:])+"  -\n"; got != want {
		t.Errorf("the process read %q, want the sum of the first %d bytes, %q", got, n, want)
	}
}

// waitStdout waits until p's stdout holds want.
func waitStdout(t *testing.T, p *Process, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		evs, changed, ended := p.Events(0)
		if strings.Contains(stdout(evs), want) {
			return
		}
		if ended {
			t.Fatalf("the process ended; stdout %q, want %q", stdout(evs), want)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("stdout %q, want %q", stdout(evs), want)
		}
	}
}
