package session

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
)

// TestMain serves as the agent of the fake sandboxes the unit tests use
// (testenv.FakeEngine); session_sandbox_test.go runs real ones as root.
func TestMain(m *testing.M) {
	testenv.AgentMain()
	testenv.Main(m)
}

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
