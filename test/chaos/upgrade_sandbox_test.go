package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

const (
	// upgradeNodes and upgradeSandboxes: issue 28's rolling upgrade, 30
	// live sandboxes on 3 nodes, half per tier.
	upgradeNodes     = 3
	upgradeSandboxes = 30
	// slowMoveCall is a call the test counts as slow (it waited for a move).
	slowMoveCall = 2 * time.Second
)

// upgradeSandbox is one of TestRollingUpgrade's sandboxes: a file, and a
// code context holding x and a background process (pid).
type upgradeSandbox struct {
	id   string
	tier sandbox.Tier
	want string
	x    int
	cid  string
	pid  int
}

// TestRollingUpgrade: three nodes on one PostgreSQL, Redis and S3 (with
// sessions.snapshots) own 30 live sandboxes, half per tier, each with a
// file, a python code context holding a variable and a background
// process. Each node in turn is taken out of the client's rotation (as a
// Service drops a pod), drained with SIGTERM — its sandboxes move through
// S3 — and started again, while a client keeps calling every sandbox
// through the nodes in rotation (reading its file; on gVisor also its
// context's variable). Done when no call failed, and afterwards 30 of 30
// answer with their file, the gVisor ones with their variable and their
// process running. Slow calls (those that waited for a move) are counted
// and reported.
func TestRollingUpgrade(t *testing.T) {
	storeURL, stateURL, blobURL := testenv.Postgres(t), testenv.Redis(t), testenv.S3(t)
	var nodes []*testserver.Server
	for i := range upgradeNodes {
		nodes = append(nodes, testserver.Start(t, testserver.Options{Store: storeURL, State: stateURL, NoPool: true,
			Config:   "\n[cluster]\nheartbeat = \"500ms\"\nlost_after = \"5s\"\n\n[sessions]\nsnapshots = true\n",
			Extra:    []string{"--node-id", fmt.Sprintf("node-%d", i), "--blob", blobURL, "--drain-timeout", "60s"},
			StopWait: 90 * time.Second}))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	clients := make([]*sandbox.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = sandbox.NewClient(sandbox.Config{Endpoint: n.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute})
	}

	start := time.Now()
	all := make([]*upgradeSandbox, upgradeSandboxes)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range all {
		g.Go(func() error {
			m, err := makeUpgradeSandbox(gctx, clients[i%len(clients)], i)
			all[i] = m
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sandboxes made on %d nodes in %v", len(all), len(nodes), time.Since(start).Round(time.Millisecond))

	// The client: workers calling every sandbox in turn through the
	// nodes in rotation.
	var (
		mu      sync.Mutex
		up      = []int{0, 1, 2}
		calls   atomic.Int64
		slow    atomic.Int64
		failed  atomic.Int64
		next    atomic.Int64
		worst   atomic.Int64
		stop    = make(chan struct{})
		workers sync.WaitGroup
	)
	// The client reaches the nodes as through a Service: each request
	// goes to the next node in rotation, a retry too.
	var turn atomic.Int64
	service := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		mu.Lock()
		n := nodes[up[int(turn.Add(1))%len(up)]]
		mu.Unlock()
		u, _ := url.Parse(n.URL)
		pr.SetURL(u)
	}})
	defer service.Close()
	// As a stock client: reads retried on a retryable answer (a call
	// that raced a sandbox's move gets one).
	viaService := sandbox.NewClient(sandbox.Config{Endpoint: service.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute, MaxRetries: 3})
	pick := func() *sandbox.Client { return viaService }
	for range 6 {
		workers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := next.Add(1)
				m := all[int(n)%len(all)]
				t0 := time.Now()
				err := m.call(ctx, pick, n%3 == 0)
				d := time.Since(t0)
				calls.Add(1)
				if d > slowMoveCall {
					slow.Add(1)
				}
				for w := worst.Load(); int64(d) > w && !worst.CompareAndSwap(w, int64(d)); w = worst.Load() {
				}
				if err != nil {
					failed.Add(1)
					t.Errorf("%s (%s): call %d: %v", m.id, m.tier, n, err)
				}
			}
		})
	}
	time.Sleep(2 * time.Second)
	for i, n := range nodes {
		mu.Lock()
		up = slices.DeleteFunc(slices.Clone(up), func(j int) bool { return j == i })
		mu.Unlock()
		// Calls sent to it before it left the rotation end first, as a
		// pod's preStop pause lets them.
		time.Sleep(500 * time.Millisecond)
		t0 := time.Now()
		n.Stop()
		drained := time.Since(t0)
		n.Launch()
		t.Logf("node-%d drained in %v, back in %v; %d calls so far, %d slow, %d failed",
			i, drained.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), calls.Load(), slow.Load(), failed.Load())
		mu.Lock()
		up = append(up, i)
		sort.Ints(up)
		mu.Unlock()
		time.Sleep(2 * time.Second)
	}
	close(stop)
	workers.Wait()
	t.Logf("rolling upgrade: %d calls, %d failed, %d slower than %v (slowest %v), in %v",
		calls.Load(), failed.Load(), slow.Load(), slowMoveCall, time.Duration(worst.Load()).Round(time.Millisecond),
		time.Since(start).Round(time.Millisecond))

	kept := 0
	for i, m := range all {
		if m.check(ctx, t, clients[i%len(clients)]) {
			kept++
		}
	}
	t.Logf("%d of %d live sandboxes answer with their files (and on gVisor their variables and processes) after the upgrade", kept, len(all))
	if kept != len(all) {
		t.Errorf("%d of %d sandboxes kept what they held", kept, len(all))
	}
	// Killed, not drained again by the nodes' stop at the end.
	for i, m := range all {
		if err := clients[i%len(clients)].Sandbox(m.id).Kill(ctx); err != nil {
			t.Errorf("%s: kill: %v", m.id, err)
		}
	}
	// Each node once more, as after the upgrade: its start reaps what the
	// moves under load left behind (a mount a slow teardown still held),
	// so that its data directory can go.
	for _, n := range nodes {
		n.Stop()
		n.Launch()
	}
}

// makeUpgradeSandbox makes sandbox i through c: gVisor for odd i.
func makeUpgradeSandbox(ctx context.Context, c *sandbox.Client, i int) (*upgradeSandbox, error) {
	tier := sandbox.TierContainer
	if i%2 == 1 {
		tier = sandbox.TierGVisor
	}
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: tier, Language: "python", TimeoutSeconds: 900})
	if err != nil {
		return nil, fmt.Errorf("create sandbox %d (%s): %w", i, tier, err)
	}
	m := &upgradeSandbox{id: sb.ID, tier: tier, want: fmt.Sprintf("kept %d %s", i, sb.ID), x: 1000 + i}
	if _, err := sb.Files().Write(ctx, "keep.txt", strings.NewReader(m.want)); err != nil {
		return nil, fmt.Errorf("%s: write: %w", sb.ID, err)
	}
	p, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"sleep", "3600"}})
	if err != nil {
		return nil, fmt.Errorf("%s: start: %w", sb.ID, err)
	}
	m.pid = p.PID
	cc, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
	if err != nil {
		return nil, fmt.Errorf("%s: create a context: %w", sb.ID, err)
	}
	m.cid = cc.ID
	if ex, err := sb.RunCode(ctx, cc.ID, fmt.Sprintf("x = %d", m.x), sandbox.RunCodeOptions{}); err != nil || ex.Error != nil {
		return nil, fmt.Errorf("%s: x = %d: %+v, %w", sb.ID, m.x, ex, err)
	}
	return m, nil
}

// call is one call of the client, each request through the node pick
// gives: the file read; with code, on gVisor, the context's variable too.
func (m *upgradeSandbox) call(ctx context.Context, pick func() *sandbox.Client, code bool) error {
	var got bytes.Buffer
	if err := pick().Sandbox(m.id).Files().Read(ctx, "keep.txt", &got); err != nil {
		return err
	}
	if got.String() != m.want {
		return fmt.Errorf("keep.txt = %q, want %q", got.String(), m.want)
	}
	if !code || m.tier != sandbox.TierGVisor {
		return nil
	}
	ex, err := pick().Sandbox(m.id).RunCode(ctx, m.cid, "x", sandbox.RunCodeOptions{})
	if err != nil {
		return err
	}
	if ex.Error != nil || ex.Text() != fmt.Sprint(m.x) {
		return fmt.Errorf("x = %+v, want %d", ex, m.x)
	}
	return nil
}

// check checks the sandbox after the upgrade and reports whether it kept
// what it held: its file, and on gVisor its variable and its process.
func (m *upgradeSandbox) check(ctx context.Context, t *testing.T, c *sandbox.Client) bool {
	t.Helper()
	if err := m.call(ctx, func() *sandbox.Client { return c }, true); err != nil {
		t.Errorf("%s (%s) after the upgrade: %v", m.id, m.tier, err)
		return false
	}
	if m.tier != sandbox.TierGVisor {
		return true
	}
	p, err := c.Sandbox(m.id).Process(m.pid).Info(ctx)
	if err != nil || !p.Running {
		t.Errorf("%s: its process after the upgrade: %+v, %v; want it running", m.id, p, err)
		return false
	}
	return true
}
