package cluster

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
)

// Timing of the clusters of these tests: a clock of their own moves them,
// so the values only need to be told apart.
const (
	heartbeat = 100 * time.Millisecond
	lostAfter = time.Second
	patience  = 30 * time.Second
)

// clock is a test's time, moved by the test only.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	// Whole microseconds: what the store keeps.
	return &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// faulty is a store whose cluster calls fail while a test says so.
type faulty struct {
	store.Store
	mu sync.Mutex
	// failing counts the calls of each method left to fail; -1 fails
	// them all.
	failing map[string]int
}

var errDown = errors.New("database is down")

func (s *faulty) fail(method string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing == nil {
		s.failing = map[string]int{}
	}
	s.failing[method] = n
}

func (s *faulty) err(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch n := s.failing[method]; {
	case n < 0:
		return errDown
	case n > 0:
		s.failing[method] = n - 1
		return errDown
	}
	return nil
}

func (s *faulty) Beat(ctx context.Context, n store.Node) error {
	if err := s.err("Beat"); err != nil {
		return err
	}
	return s.Store.Beat(ctx, n)
}

func (s *faulty) Nodes(ctx context.Context) ([]store.Node, error) {
	if err := s.err("Nodes"); err != nil {
		return nil, err
	}
	return s.Store.Nodes(ctx)
}

func (s *faulty) ClaimSession(ctx context.Context, tenant, id, node string, now time.Time) (string, error) {
	if err := s.err("ClaimSession"); err != nil {
		return "", err
	}
	return s.Store.ClaimSession(ctx, tenant, id, node, now)
}

func (s *faulty) SessionOwner(ctx context.Context, tenant, id string) (string, error) {
	if err := s.err("SessionOwner"); err != nil {
		return "", err
	}
	return s.Store.SessionOwner(ctx, tenant, id)
}

// openStore opens a SQLite store of the test's own, the store the nodes
// of a cluster share.
func openStore(t *testing.T) *faulty {
	t.Helper()
	db, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &faulty{Store: db}
}

// member returns node id of the cluster on st, on clk's time.
func member(t *testing.T, st store.Store, clk *clock, id string) *Cluster {
	c := New(Config{ID: id, Address: id + ".test:7000", Heartbeat: heartbeat, LostAfter: lostAfter}, st, testLog(t))
	if clk != nil {
		c.now = clk.now
	}
	return c
}

func beat(t *testing.T, cs ...*Cluster) {
	t.Helper()
	for _, c := range cs {
		if err := c.Beat(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(ns []store.Node) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.ID)
	}
	return out
}

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
