package session

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// registry is a cluster of one node on a SQLite store of t's own: where
// a manager records the sessions it holds.
func registry(t *testing.T) *cluster.Cluster {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return cluster.New(cluster.Config{ID: "node", Address: "127.0.0.1:1", Heartbeat: time.Second, LostAfter: time.Minute},
		st, slog.New(slog.DiscardHandler))
}

// TestExpiredIsNotRevived: a session past its TTL is gone even before the
// reaper runs. Touching it makes a new, empty session (still held by this
// node), never the old one with its files; Get agrees.
func TestExpiredIsNotRevived(t *testing.T) {
	reg := registry(t)
	m, err := New(t.Context(), DefaultConfig(t.TempDir()), nil, nil, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.now = func() time.Time { return now }
	info, created, err := m.Touch(t.Context(), "t", "s", Options{TTL: time.Minute})
	if err != nil || !created {
		t.Fatalf("Touch = created %v, %v", created, err)
	}
	// What the session's workspace holds (its disk image, once used).
	old := filepath.Join(m.cfg.Dir, "t", "s", "disk.img")
	if err := os.WriteFile(old, []byte("turn 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute + time.Second)
	if _, err := m.Get("t", "s"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get past the TTL: %v, want ErrNotFound", err)
	}
	again, created, err := m.Touch(t.Context(), "t", "s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !created || !again.CreatedAt.After(info.CreatedAt) || again.Executions != 0 {
		t.Errorf("Touch past the TTL: created %v, %+v; want a new session (the old one: %+v)", created, again, info)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the expired session's workspace is still there: %v", err)
	}
	if mine, err := reg.HoldSession(t.Context(), "t", "s"); err != nil || !mine {
		t.Errorf("the new session is not this node's: %v, %v", mine, err)
	}
	if _, err := m.Get("t", "s"); err != nil {
		t.Errorf("Get of the new session: %v", err)
	}
}

// logBuffer is a slog destination tests can read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// whichSandbox prints what tells sandboxes apart: the agent's start time
// (runc) and the kernel's boot id (one per gVisor sandbox).
const whichSandbox = `
start = open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19]
print(start + '/' + open('/proc/sys/kernel/random/boot_id').read().strip())
`

// TestKeptSandboxOverUsageIsReplaced: when a session's kept sandbox holds
// more memory than its next execution's limit (gVisor's Sentry after a big
// program; here a live process, so the test does not race the Sentry), the
// execution runs in a new sandbox on the same disk, and the kept one is
// destroyed as expected, not reported as broken.
func TestKeptSandboxOverUsageIsReplaced(t *testing.T) {
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			e := testenv.Engine(t)
			var logs logBuffer
			m, err := New(t.Context(), DefaultConfig(t.TempDir()), e, e.Fleet(), registry(t), slog.New(slog.NewTextHandler(&logs, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(m.Close) // before the engine's (cleanups run last-in first)
			run := func(code string, memoryMB int64) sandbox.Result {
				t.Helper()
				job, err := e.Prepare(sandbox.ExecuteRequest{Language: "python", Code: code, SessionID: "s",
					Isolation: sandbox.Isolation(tier), Limits: sandbox.Limits{MemoryMB: memoryMB}})
				if err != nil {
					t.Fatal(err)
				}
				job.Tenant = "t"
				if err := e.Acquire(context.Background(), job, m.Acquirer("t", "s")); err != nil {
					t.Fatal(err)
				}
				r := e.Run(context.Background(), job, nil)
				if r.Status != sandbox.StatusSuccess {
					t.Fatalf("execution %s: %+v\n%s", r.Status, r.Error, r.Stderr)
				}
				return r
			}
			first := run("open('/workspace/state.txt', 'w').write('turn 1')\n"+whichSandbox, 512)
			m.mu.Lock()
			kept := m.sessions[key("t", "s")].sb
			m.mu.Unlock()
			if kept == nil {
				t.Fatal("no sandbox kept after a clean execution")
			}
			h := runtimetest.HoldMemory(t, kept, 400)
			second := run("print(open('/workspace/state.txt').read())\n"+whichSandbox, 384)
			if second.Stdout == first.Stdout || !strings.HasPrefix(second.Stdout, "turn 1\n") {
				t.Errorf("under 384 MB, with 400 MB held by the kept sandbox: %q, want the session's file from a new sandbox (the first ran in %q)",
					second.Stdout, first.Stdout)
			}
			if _, err := h.Wait(t, time.Minute); !errors.Is(err, agent.ErrLost) {
				t.Errorf("the kept sandbox's holder: %v, want it lost with its sandbox", err)
			}
			if strings.Contains(logs.String(), "update kept session sandbox") {
				t.Errorf("a refusal to lower the limit was logged as a broken sandbox:\n%s", logs.String())
			}
		})
	}
}
