package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// startMovingNodes starts n nodes that keep paused sandboxes in one S3
// store (sessions.snapshots), on one PostgreSQL and one Redis.
func startMovingNodes(t *testing.T, n int) []*testserver.Server {
	t.Helper()
	storeURL, stateURL, blobURL := testenv.Postgres(t), testenv.Redis(t), testenv.S3(t)
	var out []*testserver.Server
	for i := range n {
		out = append(out, testserver.Start(t, testserver.Options{Store: storeURL, State: stateURL, NoPool: true,
			Config: clusterConfig + "\n[sessions]\nsnapshots = true\n",
			Extra:  []string{"--node-id", "node-" + string(rune('a'+i)), "--blob", blobURL}}))
	}
	return out
}

// moving is a live sandbox a test moves between nodes: its file, and on
// gVisor a context holding x = 21 and a background process.
type moving struct {
	id   string
	tier sandbox.Tier
	want string
	cid  string
	pid  int
}

// makeMoving creates a sandbox of tier through c with what moving checks.
func makeMoving(ctx context.Context, t *testing.T, c *sandbox.Client, tier sandbox.Tier) *moving {
	t.Helper()
	sb, _, err := c.CreateSandbox(ctx, sandbox.CreateSandboxRequest{Tier: tier, Language: "python", TimeoutSeconds: 900})
	if err != nil {
		t.Fatalf("create (%s): %v", tier, err)
	}
	m := &moving{id: sb.ID, tier: tier, want: "kept " + sb.ID}
	if _, err := sb.Files().Write(ctx, "keep.txt", strings.NewReader(m.want)); err != nil {
		t.Fatalf("%s: write: %v", sb.ID, err)
	}
	if tier != sandbox.TierGVisor {
		return m
	}
	p, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"sleep", "3600"}})
	if err != nil {
		t.Fatalf("%s: start: %v", sb.ID, err)
	}
	m.pid = p.PID
	cc, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: "python"})
	if err != nil {
		t.Fatalf("%s: create a context: %v", sb.ID, err)
	}
	m.cid = cc.ID
	if ex, err := sb.RunCode(ctx, cc.ID, "x = 21", sandbox.RunCodeOptions{}); err != nil || ex.Error != nil {
		t.Fatalf("%s: x = 21: %+v, %v", sb.ID, ex, err)
	}
	return m
}

// readFile reads the sandbox's file through c.
func (m *moving) readFile(ctx context.Context, c *sandbox.Client) error {
	var buf bytes.Buffer
	if err := c.Sandbox(m.id).Files().Read(ctx, "/workspace/keep.txt", &buf); err != nil {
		return err
	}
	if buf.String() != m.want {
		return fmt.Errorf("keep.txt = %q, want %q", buf.String(), m.want)
	}
	return nil
}

// check checks through c that the sandbox kept its file, and on gVisor
// its context's x and its process, running with its pid.
func (m *moving) check(ctx context.Context, t *testing.T, c *sandbox.Client) {
	t.Helper()
	if err := m.readFile(ctx, c); err != nil {
		t.Errorf("%s (%s): %v", m.id, m.tier, err)
	}
	if m.tier != sandbox.TierGVisor {
		return
	}
	sb := c.Sandbox(m.id)
	ex, err := sb.RunCode(ctx, m.cid, "x * 2", sandbox.RunCodeOptions{})
	if err != nil || ex.Error != nil || ex.Text() != "42" {
		t.Errorf("%s: x * 2 after the move: %+v, %v; want 42", m.id, ex, err)
	}
	p, err := sb.Process(m.pid).Info(ctx)
	if err != nil || !p.Running {
		t.Errorf("%s: the process after the move: %+v, %v; want it running", m.id, p, err)
	}
}

// TestPausedSandboxResumesElsewhere: sandboxes paused on node A (one per
// tier), A then killed (-9), are resumed through node B, which takes them
// over from the snapshot store once A is lost: their files kept, the
// gVisor one with its context's variable and its process. A started
// again reaches them on B.
func TestPausedSandboxResumesElsewhere(t *testing.T) {
	nodes := startMovingNodes(t, 2)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ca, cb := client(a, testserver.AlphaKey), client(b, testserver.AlphaKey)
	var all []*moving
	for _, tier := range []sandbox.Tier{sandbox.TierContainer, sandbox.TierGVisor} {
		m := makeMoving(ctx, t, ca, tier)
		all = append(all, m)
		info, err := ca.Sandbox(m.id).Pause(ctx)
		if err != nil {
			t.Fatalf("pause %s: %v", m.id, err)
		}
		if info.Pause == nil || info.Pause.SnapshotID == "" {
			t.Fatalf("pause %s: %+v, want a snapshot id", m.id, info.Pause)
		}
	}
	a.Kill()
	for _, m := range all {
		var info *sandbox.Info
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			info, err = cb.Sandbox(m.id).Resume(ctx)
			var se *sandbox.APIError
			if err == nil || !errors.As(err, &se) || se.Code != "sandbox_unavailable" || time.Now().After(deadline) {
				break // unavailable until A is lost
			}
		}
		if err != nil {
			t.Fatalf("resume %s through B: %v", m.id, err)
		}
		if info.Resume == nil || info.Resume.Memory != (m.tier == sandbox.TierGVisor) {
			t.Errorf("resume %s through B: %+v", m.id, info.Resume)
		}
		m.check(ctx, t, cb)
	}
	if !strings.Contains(b.Log(), "sandbox taken over") {
		t.Errorf("B took no sandbox over")
	}
	// A, back, drops its copies and reaches them on B.
	a.Launch()
	for _, m := range all {
		m.check(ctx, t, ca)
	}
}

// TestDrainMovesSandboxes: node A, told to stop (SIGTERM), moves its
// running sandboxes (one per tier) through the snapshot store while a
// client keeps reading their files through node B, retrying what the
// server says to retry: no call fails; then
// each answers through B with its file, the gVisor one with its context's
// variable and its process. A started again reaches them too.
func TestDrainMovesSandboxes(t *testing.T) {
	nodes := startMovingNodes(t, 2)
	a, b := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	ca, cb := client(a, testserver.AlphaKey), client(b, testserver.AlphaKey)
	var all []*moving
	for _, tier := range []sandbox.Tier{sandbox.TierContainer, sandbox.TierGVisor} {
		all = append(all, makeMoving(ctx, t, ca, tier))
	}
	// A call in flight on A when its drain pauses the sandbox is answered
	// 503 sandbox_unavailable with Retry-After: a client that retries what
	// the server says to retry (the SDK's MaxRetries) sees it succeed.
	retrying := sandbox.NewClient(sandbox.Config{Endpoint: b.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute, MaxRetries: 3})
	stop := make(chan struct{})
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	for _, m := range all {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				if err := m.readFile(ctx, retrying); err != nil {
					failed.Add(1)
					t.Errorf("%s (%s) through B during the drain: %v", m.id, m.tier, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	a.Stop()
	t.Logf("A drained and stopped in %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d calls through B during the drain, %d failed", calls.Load(), failed.Load())
	if !strings.Contains(a.Log(), "sandbox handed off") {
		t.Errorf("A handed no sandbox off")
	}
	for _, m := range all {
		m.check(ctx, t, cb)
		info, err := cb.Sandbox(m.id).Info(ctx)
		if err != nil || info.State != "running" {
			t.Errorf("%s after the drain: %+v, %v", m.id, info, err)
		}
	}
	a.Launch()
	for _, m := range all {
		m.check(ctx, t, ca)
	}
}
