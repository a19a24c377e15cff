package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
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
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/pool"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/state/memory"
	"github.com/corralhq/corral/internal/state/redis"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/postgres"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
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

func newLogger(cfg config.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slog.Level(cfg.Log.Level)}
	if cfg.Log.Format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

func openStore(ctx context.Context, cfg config.Config) (store.Store, error) {
	u := cfg.Store
	switch {
	case strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://"):
		return postgres.Open(ctx, u)
	case u == "":
		u = filepath.Join(cfg.DataDir, "corral.db")
	}
	return sqlite.Open(ctx, u)
}

func openState(ctx context.Context, cfg config.Config, log *slog.Logger) (state.State, error) {
	switch u := cfg.State; {
	case u == "" || u == "memory" || u == "memory://":
		return memory.New(log), nil
	case strings.HasPrefix(u, "redis://") || strings.HasPrefix(u, "rediss://"):
		// Blocking reads (the dispatcher's dequeue, each event stream a
		// client follows) hold a connection each: size the pool for them
		// unless the URL does.
		if !strings.Contains(u, "pool_size=") {
			sep := "?"
			if strings.Contains(u, "?") {
				sep = "&"
			}
			u += sep + "pool_size=" + strconv.Itoa(max(256, 4*cfg.MaxConcurrency))
		}
		s, err := redis.Open(ctx, u, log)
		return s, err
	default:
		return nil, fmt.Errorf("state %q: use memory or a redis:// URL", u)
	}
}

func tenants(cfg config.Config) []api.Tenant {
	var ts []api.Tenant
	for _, t := range cfg.Tenants {
		ts = append(ts, api.Tenant{Name: t.Name, KeyHashes: t.APIKeySHA256, CallbackSecret: []byte(t.CallbackSecret)})
	}
	if cfg.APIKey != "" {
		secret := cfg.CallbackSecret
		if secret == "" {
			secret = cfg.APIKey
		}
		found := false
		for i := range ts {
			if ts[i].Name == "default" {
				ts[i].KeyHashes = append(ts[i].KeyHashes, api.HashKey(cfg.APIKey))
				found = true
			}
		}
		if !found {
			ts = append(ts, api.Tenant{Name: "default", KeyHashes: []string{api.HashKey(cfg.APIKey)}, CallbackSecret: []byte(secret)})
		}
	}
	return ts
}

func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	auth, err := api.NewAuth(tenants(cfg))
	if err != nil {
		return err
	}
	ecfg := engine.DefaultConfig()
	ecfg.Default, ecfg.Max = cfg.Limits.Limits.Sandbox(), cfg.Limits.Max.Sandbox()
	ecfg.Pids = cfg.Pids
	ecfg.DestroyAsync = true
	ecfg.Network = cfg.Network
	ecfg.Files.MaxFileBytes = cfg.Inputs.MaxFileMB << 20
	ecfg.Files.FetchTimeout = time.Duration(cfg.Inputs.FetchTimeout)
	ecfg.Files.Client = netpolicy.Guard{AllowPrivate: cfg.Inputs.AllowPrivate}.Client(ecfg.Files.FetchTimeout)
	ecfg.Files.ArtifactTTL = time.Duration(cfg.Files.ArtifactTTL)
	ecfg.SummaryChars = cfg.Summary.MaxChars
	loc, err := newLocal(ctx, cfg.Local, ecfg, log)
	if err != nil {
		return err
	}
	defer loc.Close()
	st, err := openStore(ctx, cfg)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	ls, err := openState(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("open state: %w", err)
	}
	defer ls.Close()
	cl := cluster.New(cluster.Config{ID: cfg.NodeID, Address: cfg.AdvertiseAddress,
		Heartbeat: time.Duration(cfg.Cluster.Heartbeat), LostAfter: time.Duration(cfg.Cluster.LostAfter)},
		st, log.With("component", "cluster"))
	if err := cl.Beat(ctx); err != nil {
		return err
	}

	m := metrics.New()
	wp, err := openPool(ctx, cfg, loc, m, log.With("component", "pool"))
	if err != nil {
		return err
	}
	defer wp.Close()
	ncfg := notify.DefaultConfig()
	ncfg.MaxAttempts = cfg.Callbacks.MaxAttempts
	ncfg.BaseDelay = time.Duration(cfg.Callbacks.BaseDelay)
	routes := map[string]notify.Route{store.KindCallback: {
		Client: netpolicy.Guard{AllowPrivate: cfg.Callbacks.AllowPrivate}.Client(ncfg.Timeout), Secret: auth.Secret}}
	if cfg.Memory.URL != "" {
		secret := []byte(cfg.Memory.Secret)
		routes[store.KindMemory] = notify.Route{Client: netpolicy.Guard{AllowPrivate: cfg.Memory.AllowPrivate}.Client(ncfg.Timeout),
			Secret: func(string) []byte { return secret }}
	}
	notifier := notify.New(ncfg, st, routes, log.With("component", "notify"))
	notifier.OnAttempt = func(kind string, delivered bool) {
		outcome := "retry"
		if delivered {
			outcome = "delivered"
		}
		m.Deliveries.WithLabelValues(kind, outcome).Inc()
	}
	nc := node.DefaultConfig()
	nc.MaxConcurrency, nc.QueueBound = cfg.MaxConcurrency, cfg.QueueBound
	nc.MemoryURL = cfg.Memory.URL
	// Sessions and live sandboxes share this node's workspaces (one id
	// space, one directory per tenant/id, one reaper).
	table, err := workspace.Open(ctx, workspace.Config{Dir: filepath.Join(cfg.DataDir, "sessions"),
		ReapInterval: time.Duration(cfg.Sessions.ReapInterval)}, cl, log.With("component", "workspaces"))
	if err != nil {
		return err
	}
	scfg := session.DefaultConfig()
	scfg.DefaultTTL = time.Duration(cfg.Sessions.DefaultTTL)
	scfg.MaxTTL = time.Duration(cfg.Sessions.MaxTTL)
	scfg.DefaultDiskMB, scfg.MaxDiskMB = cfg.Sessions.DiskMB, cfg.Sessions.MaxDiskMB
	sessions := session.New(scfg, table, loc.engine, loc.fleet, log.With("component", "sessions"))
	defer sessions.Close()
	lcfg := live.DefaultConfig()
	lcfg.DefaultTimeout, lcfg.MaxTimeout = time.Duration(cfg.Sessions.SandboxTimeout), time.Duration(cfg.Sessions.MaxTTL)
	lcfg.DefaultDiskMB, lcfg.MaxDiskMB = cfg.Sessions.DiskMB, cfg.Sessions.MaxDiskMB
	lcfg.MaxProcesses = cfg.Sessions.MaxProcesses
	lcfg.PausedTTL = time.Duration(cfg.Sessions.PausedTTL)
	sandboxes := live.New(lcfg, table, loc.engine, loc.fleet, cl, log.With("component", "sandboxes"))
	defer sandboxes.Close()
	sandboxes.SetPool(wp)
	blobs, blobHandler, err := openBlob(ctx, cfg, log)
	if err != nil {
		return fmt.Errorf("open blob store: %w", err)
	}
	defer blobs.Close()
	n := node.New(nc, node.Deps{Engine: loc.engine, Fleet: loc.fleet, Pool: wp, Store: st, State: ls, Cluster: cl,
		Notifier: notifier, Metrics: m, Log: log.With("node", cfg.NodeID), Sessions: sessions,
		Artifacts: node.BlobArtifacts{Store: blobs}})
	srv := api.New(api.Config{MaxBodyBytes: cfg.MaxBodyBytes}, n, auth, m, log, st, ls)
	srv.SetFiles(sessions, blobHandler)
	srv.SetSandboxes(sandboxes)
	srv.SetCluster(cl)
	srv.SetStats(st)
	// E2B's API beside /v1, with the in-sandbox services its SDKs speak.
	srv.SetExtension(e2b.New(e2b.Config{Sandboxes: sandboxes, Keys: auth, Node: srv, Domain: cfg.E2B.Domain,
		Tier:   sandbox.Isolation(cfg.E2B.Tier),
		Envd:   envd.New(sandboxes, log.With("component", "e2b-envd")),
		Interp: interp.New(sandboxes, log.With("component", "e2b-interp")),
		Log:    log.With("component", "e2b")}))

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}

	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { cl.Run(workCtx) })
	wg.Go(func() { table.Run(workCtx) })
	wg.Go(func() {
		if err := n.Run(workCtx); err != nil {
			log.Error("node stopped", "err", err)
		}
	})
	wg.Go(func() { notifier.Run(workCtx) })
	wg.Go(func() { loc.engine.Warm(workCtx, images.HostName) })
	wg.Go(func() {
		// gVisor arriving while serving (runsc built in the background):
		// its pool classes, left out at start, start now.
		loc.awaitGVisor(workCtx, func() {
			for _, err := range wp.AddTier(workCtx, runtime.TierGVisor) {
				log.Warn("warm pool class left out", "err", err)
			}
		})
	})
	log.Info("corral serving", "listen", ln.Addr().String(), "node", cfg.NodeID, "store", storeKind(cfg.Store),
		"state", stateKind(cfg.State), "max_concurrency", cfg.MaxConcurrency, "queue_bound", cfg.QueueBound,
		"advertise_address", cfg.AdvertiseAddress)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	if ctx.Err() != nil {
		// Told to stop: no more work is claimed, and load balancers see
		// the node not ready, while what runs finishes (up to
		// drain_timeout); what has not started goes back to the queue.
		// The same signal again stops it at once.
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		srv.Drain()
		log.Info("draining", "running", n.Running(), "drain_timeout", time.Duration(cfg.DrainTimeout))
		dctx, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.DrainTimeout))
		n.Drain(dctx)
		cancel()
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	stopWork()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// openPool starts the warm pool on the node's fleet. A class whose image or
// tier is not available here is left out, with a warning.
func openPool(ctx context.Context, cfg config.Config, loc *local, m *metrics.Metrics, log *slog.Logger) (*pool.Pool, error) {
	pc := pool.DefaultConfig()
	pc.MaxUses = cfg.Pool.MaxUses
	pc.IdleTimeout = time.Duration(cfg.Pool.IdleTimeout)
	for _, w := range cfg.Pool.Warm {
		pc.Warm = append(pc.Warm, pool.Warm{Image: w.Image, Tier: runtime.Tier(w.Tier), Language: w.Language,
			MinIdle: w.MinIdle, MaxIdle: w.MaxIdle, Zygote: w.Zygote, Preload: w.Preload})
	}
	p, skipped := pool.New(ctx, loc.fleet, loc.engine, pc, m, log)
	for _, err := range skipped {
		log.Warn("warm pool class left out", "err", err)
	}
	return p, nil
}

// openBlob opens the artifact store: a directory in the data dir whose
// signed links corral serves itself (the default), or S3-compatible
// storage with presigned links.
func openBlob(ctx context.Context, cfg config.Config, log *slog.Logger) (blob.Store, http.Handler, error) {
	switch u := cfg.Blob; {
	case u == "":
		st, err := localblob.New(filepath.Join(cfg.DataDir, "blobs"), cfg.PublicURL, nil, log.With("component", "blobs"))
		if err != nil {
			return nil, nil, err
		}
		return st, st.Handler(), nil
	case strings.HasPrefix(u, "s3://"):
		st, err := s3.Open(ctx, u)
		return st, nil, err
	default:
		return nil, nil, fmt.Errorf("blob %q: leave it empty for local storage, or give an s3:// URL", u)
	}
}

func storeKind(u string) string {
	if strings.HasPrefix(u, "postgres") {
		return "postgres"
	}
	return "sqlite"
}

func stateKind(u string) string {
	if strings.HasPrefix(u, "redis") {
		return "redis"
	}
	return "memory"
}
