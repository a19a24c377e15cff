package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/corralhq/corral/internal/audit"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/blob"
	localblob "github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/blob/s3"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/e2b"
	"github.com/corralhq/corral/internal/e2b/envd"
	"github.com/corralhq/corral/internal/e2b/interp"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/pool"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/state/memory"
	"github.com/corralhq/corral/internal/state/redis"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/tlscert"
	"github.com/corralhq/corral/internal/tracing"
	"github.com/corralhq/corral/internal/workspace"
)

// cmdServe runs the HTTP API and this node's share of the work.
func cmdServe(args []string) int {
	cfg, err := config.Parse("serve", args, os.LookupEnv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral serve:", err)
		return 2
	}
	log := newLogger(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("corral serve stopped", "err", err)
		return 1
	}
	return 0
}

// newLogger is serve's logger; with tracing on, each line logged inside a
// span names its trace and span.
func newLogger(cfg config.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(cfg.Log.Level)}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if cfg.Log.Format == "text" {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	if cfg.TracingConfig().On() {
		h = tracing.NewLogHandler(h)
	}
	return slog.New(h)
}

// How long open connections get to finish once the node has drained.
const shutdownTimeout = 10 * time.Second

// serve runs corral serve: cfg mapped to what each component takes
// (planServe), the components opened in order (open), served until ctx
// ends, then drained (run). What was opened is closed in reverse order,
// whether the start failed half way or the node stopped.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) (err error) {
	p, err := planServe(cfg)
	if err != nil {
		return err
	}
	keepGCHeadroom()
	limitProcs()
	var cu cleanup
	defer func() { err = errors.Join(err, cu.Clean()) }()
	tp, err := tracing.Setup(ctx, p.Tracing, log.With("component", "tracing"))
	if err != nil {
		return err
	}
	// Closed last: the spans of the rest's closing are exported too.
	cu.Add(func() error {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return tp.Shutdown(sctx)
	})
	d, err := open(ctx, p, log, &cu)
	if err != nil {
		return err
	}
	return d.run(ctx)
}

// daemon is what corral serve runs, opened.
type daemon struct {
	plan     plan
	log      *slog.Logger
	local    *local
	cluster  *cluster.Cluster
	pool     *pool.Pool
	table    *workspace.Table
	live     *live.Manager
	notifier *notify.Notifier
	node     *node.Node
	api      *api.Server
	handler  http.Handler
	// cert is the listener's certificate; nil serves http.
	cert *tlscert.Reloader
	// audit records (nil: the trail is off); auditLog and auditStore
	// read and prune it.
	audit      audit.Recorder
	auditLog   api.AuditSource
	auditStore audit.Pruner
}

// open opens what p describes, in order: the listener's certificate and
// the peers' CAs (with TLS), runtimes and engine (reaping what a previous
// process left), store, state, this node's heartbeat, warm pool,
// notifier, blob store (and the snapshot store on it), workspaces with
// their sessions and live sandboxes,
// node, API with E2B's beside it. Each one opened is closed by cu.
func open(ctx context.Context, p plan, log *slog.Logger, cu *cleanup) (*daemon, error) {
	auth, err := api.NewAuth(p.Tenants)
	if err != nil {
		return nil, err
	}
	var cert *tlscert.Reloader
	if p.TLS.On() {
		if cert, p.Cluster.PeerTLS, err = openTLS(p.TLS, log); err != nil {
			return nil, err
		}
	}
	d := &daemon{plan: p, log: log, cert: cert}
	if d.local, err = newLocal(ctx, p.Local, p.Engine, log); err != nil {
		return nil, err
	}
	cu.AddFunc(d.local.Close)
	st, err := openStore(ctx, p.Store)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	cu.Add(st.Close)
	ls, err := openState(ctx, p.State, log)
	if err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	cu.Add(ls.Close)
	d.cluster = cluster.New(p.Cluster, st, log.With("component", "cluster"))
	if err := d.cluster.Beat(ctx); err != nil {
		return nil, err
	}
	m := metrics.New()
	if err := d.openAudit(p, st, m, cu); err != nil {
		return nil, err
	}
	d.pool = openPool(ctx, p.Pool, d.local, m, log.With("component", "pool"))
	cu.AddFunc(d.pool.Close)
	d.notifier = newNotifier(p, st, auth, m, log)
	blobs, blobHandler, err := openBlob(ctx, p, log)
	if err != nil {
		return nil, fmt.Errorf("open blob store: %w", err)
	}
	cu.Add(blobs.Close)
	// Always: clients' snapshots are kept there; pauses write to it too
	// with sessions.snapshots.
	snaps, err := snapshot.New(blobs, snapshot.Options{})
	if err != nil {
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	cu.Add(snaps.Close)
	d.plan.Sandboxes.Snapshots, d.plan.Sandboxes.PauseSnapshots = snaps, p.Snapshots
	sessions, sandboxes, err := d.openWorkspaces(ctx, cu)
	if err != nil {
		return nil, err
	}
	d.node = node.New(p.Node, node.Deps{Engine: d.local.engine, Fleet: d.local.fleet, Pool: d.pool, Store: st, State: ls,
		Cluster: d.cluster, Notifier: d.notifier, Metrics: m, Log: log.With("node", p.Cluster.ID), Sessions: sessions,
		Artifacts: node.BlobArtifacts{Store: blobs}, Audit: d.audit})
	d.api = api.New(p.API, api.Deps{Node: d.node, Auth: auth, Metrics: m, Log: log, Ready: []api.Pinger{st, ls},
		Sessions: sessions, Sandboxes: sandboxes, Cluster: d.cluster, Blobs: blobHandler, Stats: st,
		Audit: d.audit, AuditLog: d.auditLog})
	// E2B's API beside /v1, with the in-sandbox services its SDKs speak.
	d.handler = d.api.Handler(e2b.New(e2b.Config{Sandboxes: sandboxes, Keys: auth, Node: d.api,
		Domain: p.E2B.Domain, Tier: p.E2B.Tier,
		Envd:   envd.New(sandboxes, log.With("component", "e2b-envd")),
		Interp: interp.New(sandboxes, log.With("component", "e2b-interp")),
		Log:    log.With("component", "e2b"), Audit: d.audit}))
	return d, nil
}

// openAudit starts the audit trail's writer (and its sink) when it is on:
// events go to st, the store every node shares, so one tenant's chain is
// one whatever node records.
func (d *daemon) openAudit(p plan, st store.Store, m *metrics.Metrics, cu *cleanup) error {
	if p.Audit == nil {
		return nil
	}
	var sinks []audit.Sink
	if p.AuditSink != "" {
		sink, err := audit.OpenSink(p.AuditSink)
		if err != nil {
			return err
		}
		sinks = append(sinks, sink)
	}
	cfg := *p.Audit
	cfg.Node = p.Cluster.ID
	w := audit.NewWriter(st, cfg, sinks, m.AuditEvents, d.log.With("component", "audit"))
	cu.Add(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return w.Close(ctx)
	})
	d.audit, d.auditLog, d.auditStore = w, st, st
	return nil
}

// openWorkspaces opens this node's workspaces, which sessions and live
// sandboxes share (one id space, one directory per tenant/id, one reaper).
func (d *daemon) openWorkspaces(ctx context.Context, cu *cleanup) (*session.Manager, *live.Manager, error) {
	var err error
	d.table, err = workspace.Open(ctx, d.plan.Workspaces, d.cluster, d.log.With("component", "workspaces"))
	if err != nil {
		return nil, nil, err
	}
	sessions := session.New(d.plan.Sessions, d.table, d.local.engine, d.local.fleet, d.log.With("component", "sessions"))
	cu.AddFunc(sessions.Close)
	d.live = live.New(d.plan.Sandboxes, live.Deps{Table: d.table, Engine: d.local.engine, Fleet: d.local.fleet,
		Publisher: d.cluster, Mover: d.cluster, Pool: d.pool, Log: d.log.With("component", "sandboxes")})
	cu.AddFunc(d.live.Close)
	return sessions, d.live, nil
}

// run serves until ctx ends (SIGTERM) or the listener fails; it drains
// the node if told to stop, then stops the HTTP server and the background
// work.
func (d *daemon) run(ctx context.Context) error {
	ln, err := net.Listen("tcp", d.plan.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{Handler: d.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn)}
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	d.start(work, &wg)
	serveLn := hs.Serve
	if d.cert != nil {
		hs.TLSConfig = d.cert.ServerConfig()
		serveLn = func(ln net.Listener) error { return hs.ServeTLS(ln, "", "") }
	}
	d.log.Info("corral serving", "listen", ln.Addr().String(), "tls", d.cert != nil, "node", d.plan.Cluster.ID, "store", d.plan.Store.Kind,
		"state", d.plan.State.Kind, "max_concurrency", d.plan.Node.MaxConcurrency, "queue_bound", d.plan.Node.QueueBound,
		"advertise_address", d.plan.Cluster.Address)
	errc := make(chan error, 1)
	go func() { errc <- serveLn(ln) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	if ctx.Err() != nil {
		d.drain()
	}
	d.log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	_ = hs.Shutdown(sctx)
	stopWork()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// start runs the node's background work on wg until ctx ends: heartbeat,
// workspace reaper, live sandboxes' usage readings and their pauses at
// their timeout or when idle, dispatcher,
// deliveries, the warming of the host image's caches, and the warm pool
// classes left out at start once their image is built or runsc arrives.
func (d *daemon) start(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() { d.cluster.Run(ctx) })
	wg.Go(func() { d.table.Run(ctx) })
	wg.Go(func() { d.live.Sample(ctx) })
	wg.Go(func() { d.live.Run(ctx) })
	wg.Go(func() {
		if err := d.node.Run(ctx); err != nil {
			d.log.Error("node stopped", "err", err)
		}
	})
	wg.Go(func() { d.notifier.Run(ctx) })
	if d.auditStore != nil {
		var names []string
		for _, t := range d.plan.Tenants {
			names = append(names, t.Name)
		}
		wg.Go(func() {
			audit.RunRetention(ctx, d.auditStore, d.plan.AuditRetention, names, time.Hour, d.log.With("component", "audit"))
		})
	}
	wg.Go(func() { d.local.engine.Warm(ctx, images.HostName) })
	wg.Go(func() { d.awaitImages(ctx) })
	wg.Go(func() {
		// gVisor arriving while serving (runsc built in the background):
		// its pool classes, left out at start, start now.
		d.local.awaitGVisor(ctx, func() {
			for _, err := range d.pool.AddTier(ctx, runtime.TierGVisor) {
				d.log.Warn("warm pool class left out", "err", err)
			}
		})
	})
}

// drain is the answer to SIGTERM (docs/ARCHITECTURE.md): /readyz answers
// 503 so load balancers look elsewhere, no more work is claimed, what has
// not started goes back to the queue, and what runs may finish for the
// drain timeout, while the live sandboxes move to the other nodes through
// the snapshot store (with sessions.snapshots; live.Manager.Drain). The
// same signal again stops at once.
func (d *daemon) drain() {
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	d.api.Drain()
	d.log.Info("draining", "running", d.node.Running(), "drain_timeout", d.plan.DrainTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), d.plan.DrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	// Live sandboxes move to the other nodes meanwhile (with snapshots).
	wg.Go(func() { d.live.Drain(ctx) })
	d.node.Drain(ctx)
	wg.Wait()
}

// openTLS reads the listener's certificate, and the CAs the other nodes'
// certificates are verified with (nil: the system's roots).
func openTLS(c config.TLS, log *slog.Logger) (*tlscert.Reloader, *tls.Config, error) {
	cert, err := tlscert.NewReloader(c.Cert, c.Key, log.With("component", "tls"))
	if err != nil {
		return nil, nil, err
	}
	peer := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.PeerCA != "" {
		if peer.RootCAs, err = tlscert.Pool(c.PeerCA); err != nil {
			return nil, nil, err
		}
	}
	return cert, peer, nil
}

func openStore(ctx context.Context, b backend) (store.Store, error) {
	if b.Kind == "postgres" {
		return postgres.Open(ctx, b.URL)
	}
	return sqlite.Open(ctx, b.URL)
}

func openState(ctx context.Context, b backend, log *slog.Logger) (state.State, error) {
	if b.Kind == "redis" {
		return redis.Open(ctx, b.URL, log)
	}
	return memory.New(log), nil
}

// openBlob opens the artifact store, and the handler of the links it
// signs if corral serves them itself (local blobs).
func openBlob(ctx context.Context, p plan, log *slog.Logger) (blob.Store, http.Handler, error) {
	if p.Blob.Kind == "s3" {
		st, err := s3.Open(ctx, p.Blob.URL)
		return st, nil, err
	}
	st, err := localblob.New(p.Blob.URL, p.PublicURL, nil, log.With("component", "blobs"))
	if err != nil {
		return nil, nil, err
	}
	return st, st.Handler(), nil
}

// openPool starts the warm pool on the node's fleet. A class whose image or
// tier is not available here is left out, with a warning.
func openPool(ctx context.Context, pc pool.Config, loc *local, m *metrics.Metrics, log *slog.Logger) *pool.Pool {
	p, skipped := pool.New(ctx, loc.fleet, loc.engine, pc, m, log)
	for _, err := range skipped {
		log.Warn("warm pool class left out", "err", err)
	}
	return p
}

// newNotifier sends callbacks and memory deliveries, counting each
// attempt's outcome.
func newNotifier(p plan, st store.Store, auth *api.Auth, m *metrics.Metrics, log *slog.Logger) *notify.Notifier {
	n := notify.New(p.Notify, st, p.routes(auth.Secret), log.With("component", "notify"))
	n.OnAttempt = func(kind string, delivered bool) {
		outcome := "retry"
		if delivered {
			outcome = "delivered"
		}
		m.Deliveries.WithLabelValues(kind, outcome).Inc()
	}
	return n
}
