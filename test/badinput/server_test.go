// Package badinput sends every route of Corral's API and of E2B's the
// malformed inputs of issue 26 (docs/testing.md): every operation of
// api/openapi.yaml, and every E2B route as the code registers it, over the
// real server in process on the fake runtime. Each case must be answered
// with a 4xx and the wire's error body within 10 s, and the server must
// serve after each route.
package badinput

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/e2b"
	"github.com/corralhq/corral/internal/e2b/envd"
	"github.com/corralhq/corral/internal/e2b/interp"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/state/memory"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/workspace"
)

// TestMain serves as the agent of the fake sandboxes (testenv.FakeEngine).
func TestMain(m *testing.M) { testenv.FakeMain(m) }

// The tenants: alpha's key is in E2B's shape, so one key serves both APIs;
// forged is alpha's in shape, but no tenant's.
const (
	keyAlpha = "e2b_a11a0000000000000000000000000000000000aa"
	keyBeta  = "e2b_be7a0000000000000000000000000000000000bb"
	forged   = "e2b_a11a0000000000000000000000000000000000ab"
)

// server is what corral serve runs (cmd/corral/serve.go), in process over
// the fake runtime: the node and its dispatcher, sessions, live sandboxes,
// a cluster of one on SQLite, local blobs, and E2B's API with envd and the
// code interpreter beside /v1.
type server struct {
	url   string
	blobs *local.Store
	logs  *testenv.LogBuffer
}

func newServer(t *testing.T) *server {
	t.Helper()
	s := &server{logs: &testenv.LogBuffer{}}
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fk := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ls := memory.New(log)
	t.Cleanup(func() { ls.Close() })
	hs := httptest.NewUnstartedServer(nil)
	s.url = "http://" + hs.Listener.Addr().String()
	// Closed last: a handler blocked for good (a case that hangs) returns
	// once the sandboxes are gone, and Close waits for it.
	t.Cleanup(hs.Close)
	cl := cluster.New(cluster.Config{ID: "node", Address: hs.Listener.Addr().String(), Heartbeat: time.Second,
		LostAfter: time.Minute}, st, log)
	if err := cl.Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, cl, log)
	if err != nil {
		t.Fatal(err)
	}
	auth, err := api.NewAuth([]api.Tenant{
		{Name: "alpha", KeyHashes: []string{api.HashKey(keyAlpha)}},
		{Name: "beta", KeyHashes: []string{api.HashKey(keyBeta)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions := session.New(session.DefaultConfig(), table, fk.Engine, fk.Fleet, log)
	t.Cleanup(sessions.Close)
	lc := live.DefaultConfig()
	lc.StdinStall = 2 * time.Second // under patience: the bound is answered, not a hang
	snapBlobs, err := local.New(filepath.Join(t.TempDir(), "snapshots"), s.url, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snapBlobs.Close() })
	if lc.Snapshots, err = snapshot.New(snapBlobs, snapshot.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Snapshots.Close() })
	sandboxes := live.New(lc, live.Deps{Table: table, Engine: fk.Engine, Fleet: fk.Fleet, Publisher: cl, Log: log})
	t.Cleanup(sandboxes.Close)
	s.blobs, err = local.New(filepath.Join(t.TempDir(), "blobs"), s.url, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.blobs.Close() })
	m := metrics.New()
	// The audit trail is on, as corral serve's default: every hostile
	// call goes through its hooks too.
	aw := audit.NewWriter(st, audit.WriterConfig{Node: "node"}, nil, m.AuditEvents, log)
	t.Cleanup(func() { aw.Close(context.Background()) })
	nc := node.DefaultConfig()
	nc.MaxConcurrency, nc.QueueBound = 2, 256
	nc.PollInterval, nc.CheckInterval = 20*time.Millisecond, 50*time.Millisecond
	nc.WaitMargin = 5 * time.Second
	n := node.New(nc, node.Deps{Engine: fk.Engine, Fleet: fk.Fleet, Store: st, State: ls, Cluster: cl, Metrics: m,
		Log: log, Sessions: sessions, Audit: aw})
	srv := api.New(api.Config{}, api.Deps{Node: n, Auth: auth, Metrics: m, Log: log, Sessions: sessions,
		Sandboxes: sandboxes, Cluster: cl, Blobs: s.blobs.Handler(), Stats: st, Audit: aw, AuditLog: st})
	hs.Config.Handler = srv.Handler(e2b.New(e2b.Config{Sandboxes: sandboxes, Keys: auth, Node: srv, Log: log, Audit: aw,
		Envd: envd.New(sandboxes, log), Interp: interp.New(sandboxes, log)}))
	hs.Start()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.Run(ctx); err != nil {
			t.Errorf("node: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the server logged:\n%s", s.logs)
		}
	})
	return s
}

// healthy reports whether the server answers GET /healthz.
func (s *server) healthy() bool {
	res, err := client.Get(s.url + "/healthz")
	if err != nil {
		return false
	}
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}
