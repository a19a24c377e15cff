package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/state/memory"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// The test binary is the fake sandboxes' agent (testenv.FakeEngine).
func TestMain(m *testing.M) {
	testenv.AgentMain()
	os.Exit(m.Run())
}

// patience bounds every wait for something that is bound to happen: long,
// because a loaded machine may be slow, and never reached when all is well.
const patience = 30 * time.Second

// world is what the nodes of one test share, as the nodes of a cluster
// share them: the store (one SQLite file: the queue, heartbeats, session
// owners) and the state (signals and event logs).
type world struct {
	t     *testing.T
	store store.Store
	state *memory.State
	dir   string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	dir := t.TempDir()
	db, err := sqlite.Open(t.Context(), filepath.Join(dir, "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := memory.New(testLog(t))
	t.Cleanup(func() { st.Close() })
	return &world{t: t, store: db, state: st, dir: dir}
}

// setup is what a test may change before a node is made.
type setup struct {
	cfg     Config
	cluster cluster.Config
	deps    Deps
	fake    *testenv.Fake
	// sessions gives the node a session manager.
	sessions bool
}

// tnode is a node of a test with what it was made of.
type tnode struct {
	*Node
	fake    *testenv.Fake
	cl      *cluster.Cluster
	metrics *metrics.Metrics

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// testConfig is a node's configuration in tests: loops fast enough that
// nothing waits for long, and a cluster whose nodes are not declared lost
// by a slow machine's pauses (tests of lost nodes shorten LostAfter).
func testConfig() (Config, cluster.Config) {
	cfg := DefaultConfig()
	cfg.MaxConcurrency = 2
	cfg.PollInterval = 20 * time.Millisecond
	cfg.CheckInterval = 50 * time.Millisecond
	cfg.ReapInterval = 50 * time.Millisecond
	cfg.SweepInterval = time.Hour
	cfg.EventTTL = time.Minute
	cfg.WaitMargin = 5 * time.Second
	cfg.StoreRetry = patience
	return cfg, cluster.Config{Heartbeat: time.Second, LostAfter: time.Minute}
}

// newNode makes node id over its own fake engine; it is not running
// (start). Each option may change the setup, with the node's fake engine
// at hand.
func (w *world) newNode(id string, opts ...func(*setup)) *tnode {
	t := w.t
	t.Helper()
	cfg, ccfg := testConfig()
	ccfg.ID, ccfg.Address = id, id+".invalid:1"
	s := &setup{cfg: cfg, cluster: ccfg, fake: testenv.FakeEngine(t)}
	log := testLog(t).With("node", id)
	s.deps = Deps{Engine: s.fake.Engine, Fleet: s.fake.Fleet, Store: w.store, State: w.state,
		Metrics: metrics.New(), Log: log}
	for _, o := range opts {
		o(s)
	}
	cl := cluster.New(s.cluster, s.deps.Store, log)
	s.deps.Cluster = cl
	if s.sessions {
		table, err := workspace.Open(t.Context(), workspace.Config{Dir: filepath.Join(w.dir, "sessions", id),
			ReapInterval: 30 * time.Second}, cl, log)
		if err != nil {
			t.Fatal(err)
		}
		m := session.New(session.DefaultConfig(), table, s.fake.Engine, s.fake.Fleet, log)
		t.Cleanup(m.Close)
		s.deps.Sessions = m
	}
	if err := cl.Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	return &tnode{Node: New(s.cfg, s.deps), fake: s.fake, cl: cl, metrics: s.deps.Metrics}
}

// start runs the node and its heartbeat until the test ends (or stop).
func (n *tnode) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { n.cl.Run(ctx) })
	wg.Go(func() {
		if err := n.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	go func() {
		wg.Wait()
		close(n.done)
	}()
	t.Cleanup(n.stop)
}

// stop ends Run's context and returns once Run has returned: what ran is
// recorded by then.
func (n *tnode) stop() {
	n.stopOnce.Do(func() {
		n.cancel()
		<-n.done
	})
}

// created counts the sandboxes this node's runtimes made.
func (n *tnode) created() int {
	c := 0
	for _, rt := range n.fake.Runtimes {
		c += rt.Created()
	}
	return c
}

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// submit submits req for tenant on n and fails the test if it was not
// queued anew.
func submit(t *testing.T, n *tnode, tenant string, req sandbox.ExecuteRequest) *store.Execution {
	t.Helper()
	sub, err := n.Submit(t.Context(), tenant, req)
	if err != nil {
		t.Fatalf("submit %s: %v", req.ExecutionID, err)
	}
	if !sub.Created {
		t.Fatalf("submit %s: not created", req.ExecutionID)
	}
	return sub.Execution
}

// final waits (on n) for an execution's final record.
func final(t *testing.T, n *tnode, tenant, id string) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	rec, err := n.Wait(ctx, tenant, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	if !rec.Status.Final() {
		t.Fatalf("%s still %s after %s", id, rec.Status, patience)
	}
	return rec
}

// stored reads an execution straight from the store.
func (w *world) stored(tenant, id string) *store.Execution {
	w.t.Helper()
	ex, err := w.store.GetExecution(w.t.Context(), tenant, id)
	if err != nil {
		w.t.Fatalf("get %s: %v", id, err)
	}
	return ex
}

// eventually fails t with what unless cond comes true in time.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !testenv.Eventually(t, patience, cond) {
		t.Fatalf("timed out waiting: %s", what)
	}
}

// gate lets a test hold programs running until it opens them: a program
// made by code marks its start (appending a line to a file of its own,
// so that a second run would show) and waits for its gate file. Programs
// see the host's file system, so the paths are the test's own.
type gate struct{ dir string }

func newGate(t *testing.T) gate {
	return gate{dir: t.TempDir()}
}

// code is a python program named name that marks its start, waits for its
// gate and prints "done name".
func (g gate) code(name string) string {
	return fmt.Sprintf(`import os, time
with open(%s, "a") as f:
    f.write("run\n")
while not os.path.exists(%s):
    time.sleep(0.01)
print("done %s")
`, strconv.Quote(g.path(name, "runs")), strconv.Quote(g.path(name, "open")), name)
}

// req is the request of the gated program name, with a timeout far
// beyond any wait of the tests: only what a test does ends it early.
func (g gate) req(name string) sandbox.ExecuteRequest {
	return sandbox.ExecuteRequest{ExecutionID: name, Language: "python", Code: g.code(name),
		Limits: sandbox.Limits{TimeoutMS: 10 * 60_000}}
}

func (g gate) path(name, what string) string { return filepath.Join(g.dir, name+"."+what) }

// runs counts the times program name started.
func (g gate) runs(name string) int {
	b, _ := os.ReadFile(g.path(name, "runs"))
	return strings.Count(string(b), "run\n")
}

// started waits until program name is running.
func (g gate) started(t *testing.T, name string) {
	t.Helper()
	eventually(t, name+" starts", func() bool { return g.runs(name) > 0 })
}

// open lets program name finish.
func (g gate) open(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(g.path(name, "open"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// holdAcquirer lends sandboxes through inner, except to claims of tenant
// held: those wait until their context ends, as an execution waits for a
// sandbox that does not come. Each held claim is announced on entered.
type holdAcquirer struct {
	inner   fleet.Acquirer
	held    string
	entered chan string
	n       atomic.Int32
}

func newHoldAcquirer(inner fleet.Acquirer, held string) *holdAcquirer {
	return &holdAcquirer{inner: inner, held: held, entered: make(chan string, 16)}
}

func (a *holdAcquirer) Acquire(ctx context.Context, c fleet.Claim) (*fleet.Lease, error) {
	if c.Tenant != a.held {
		return a.inner.Acquire(ctx, c)
	}
	a.n.Add(1)
	a.entered <- c.Tenant
	<-ctx.Done()
	return nil, ctx.Err()
}

// waitEntered waits for a held claim.
func (a *holdAcquirer) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-a.entered:
	case <-time.After(patience):
		t.Fatal("no held claim came")
	}
}

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// flakyStore is a store whose claims, writes of final records and
// hand-backs fail as a test says: fail returns the error of the n-th call (from 1), nil to
// let it through.
type flakyStore struct {
	store.Store
	mu                sync.Mutex
	finishFail        func(n int) error
	updateFail        func(n int) error
	claimFail         func(n int) error
	finishes, updates int
	claims            int
	// getFail, when set, fails every GetExecution; gets counts them.
	getFail error
	gets    int
}

func (s *flakyStore) GetExecution(ctx context.Context, tenant, id string) (*store.Execution, error) {
	s.mu.Lock()
	s.gets++
	fail := s.getFail
	s.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	return s.Store.GetExecution(ctx, tenant, id)
}

func (s *flakyStore) ClaimExecution(ctx context.Context, node string, now time.Time) (*store.Execution, error) {
	s.mu.Lock()
	s.claims++
	n := s.claims
	s.mu.Unlock()
	if s.claimFail != nil {
		if err := s.claimFail(n); err != nil {
			return nil, err
		}
	}
	return s.Store.ClaimExecution(ctx, node, now)
}

func (s *flakyStore) FinishExecution(ctx context.Context, e *store.Execution, d []store.Delivery, from ...sandbox.Status) (*sandbox.Result, error) {
	s.mu.Lock()
	s.finishes++
	n := s.finishes
	s.mu.Unlock()
	if s.finishFail != nil {
		if err := s.finishFail(n); err != nil {
			return nil, err
		}
	}
	return s.Store.FinishExecution(ctx, e, d, from...)
}

func (s *flakyStore) UpdateExecution(ctx context.Context, e *store.Execution, from ...sandbox.Status) error {
	s.mu.Lock()
	s.updates++
	n := s.updates
	s.mu.Unlock()
	if s.updateFail != nil {
		if err := s.updateFail(n); err != nil {
			return err
		}
	}
	return s.Store.UpdateExecution(ctx, e, from...)
}

func (s *flakyStore) calls() (finishes, updates int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finishes, s.updates
}

// unavailable is how a store says it cannot be reached for now.
func unavailable() error { return fmt.Errorf("finish execution: %w", store.ErrUnavailable) }
