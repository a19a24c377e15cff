package main

import (
	"fmt"
	"github.com/corralhq/corral/internal/audit"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/node"
	"github.com/corralhq/corral/internal/notify"
	"github.com/corralhq/corral/internal/pool"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/tracing"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// plan is corral serve's configuration as its components take it: what
// each one is built from, mapped from the loaded configuration by
// planServe, which opens and reads nothing (serve.go opens them). corral
// config check runs the same mapping.
type plan struct {
	// Tenants are the API's: the file's, and the tenant "default" of
	// --api-key.
	Tenants []api.Tenant
	// Local is how this machine makes sandboxes (newLocal); Engine is the
	// engine's limits policy.
	Local  config.Local
	Engine engine.Config
	// Store, State and Blob are the backends to open.
	Store, State, Blob backend
	// PublicURL is how clients reach this server, for the links local
	// blobs sign.
	PublicURL string
	Cluster   cluster.Config
	Pool      pool.Config
	Notify    notify.Config
	// Callbacks guards where callbacks may go; Memory is the memory
	// service's route, nil without one.
	Callbacks netpolicy.Guard
	Memory    *memoryRoute
	Node      node.Config
	// Workspaces is the table sessions and live sandboxes share.
	Workspaces workspace.Config
	Sessions   session.Config
	Sandboxes  live.Config
	API        api.Config
	E2B        e2bPlan
	Listen     string
	// TLS, if on, makes the listener serve https and forwarding between
	// nodes use it (open reads the files).
	TLS config.TLS
	// DrainTimeout is how long what runs may finish after SIGTERM.
	DrainTimeout time.Duration
	// Snapshots: paused live sandboxes are kept in the blob store too
	// (sessions.snapshots).
	Snapshots bool
	// Audit is the audit trail's writer (nil Audit: off), its sink and
	// each tenant's retention.
	Audit          *audit.WriterConfig
	AuditSink      string
	AuditRetention audit.Retention
	// Tracing is where spans go; off without an endpoint.
	Tracing tracing.Config
}

// backend is a store, state or blob store to open.
type backend struct {
	// Kind is sqlite or postgres (store), memory or redis (state), local
	// or s3 (blob).
	Kind string
	// URL is where: a URL, or the path of a SQLite file or of the local
	// blobs' directory ("" for state in memory).
	URL string
}

// memoryRoute is how summaries reach the memory service.
type memoryRoute struct {
	Guard  netpolicy.Guard
	Secret []byte
}

// e2bPlan is what the E2B API is built with beside its dependencies.
type e2bPlan struct {
	Domain string
	Tier   sandbox.Isolation
}

// planServe maps cfg, loaded and validated, to what corral serve builds.
// An error names a setting no component can take.
func planServe(cfg config.Config) (plan, error) {
	p := plan{Tenants: tenants(cfg), Local: cfg.Local, Engine: engineConfig(cfg), PublicURL: cfg.PublicURL,
		Listen: cfg.Listen, TLS: cfg.TLS, DrainTimeout: time.Duration(cfg.DrainTimeout), Snapshots: cfg.Sessions.Snapshots, Tracing: cfg.TracingConfig(), API: api.Config{MaxBodyBytes: cfg.MaxBodyBytes},
		E2B: e2bPlan{Domain: cfg.E2B.Domain, Tier: sandbox.Isolation(cfg.E2B.Tier)}}
	p.Store = storeBackend(cfg)
	var err error
	if p.State, err = stateBackend(cfg); err != nil {
		return plan{}, err
	}
	if p.Blob, err = blobBackend(cfg); err != nil {
		return plan{}, err
	}
	p.Cluster = cluster.Config{ID: cfg.NodeID, Address: cfg.AdvertiseAddress,
		Heartbeat: time.Duration(cfg.Cluster.Heartbeat), LostAfter: time.Duration(cfg.Cluster.LostAfter)}
	p.Pool = poolConfig(cfg)
	p.Notify = notify.DefaultConfig()
	p.Notify.MaxAttempts = cfg.Callbacks.MaxAttempts
	p.Notify.BaseDelay = time.Duration(cfg.Callbacks.BaseDelay)
	p.Callbacks = netpolicy.Guard{AllowPrivate: cfg.Callbacks.AllowPrivate}
	if cfg.Memory.URL != "" {
		p.Memory = &memoryRoute{Guard: netpolicy.Guard{AllowPrivate: cfg.Memory.AllowPrivate}, Secret: []byte(cfg.Memory.Secret)}
	}
	p.Node = node.DefaultConfig()
	p.Node.MaxConcurrency, p.Node.QueueBound = cfg.MaxConcurrency, cfg.QueueBound
	p.Node.MemoryURL = cfg.Memory.URL
	p.Workspaces = workspace.Config{Dir: filepath.Join(cfg.DataDir, "sessions"), ReapInterval: time.Duration(cfg.Sessions.ReapInterval)}
	p.Sessions, p.Sandboxes = sessionConfigs(cfg)
	if cfg.Audit.Enabled {
		p.Audit = &audit.WriterConfig{Node: cfg.NodeID, Queue: cfg.Audit.Queue, Batch: cfg.Audit.Batch,
			Flush: time.Duration(cfg.Audit.Flush), FullWait: time.Duration(cfg.Audit.FullWait)}
		p.AuditSink = cfg.Audit.Sink
		p.AuditRetention = audit.Retention{Default: time.Duration(cfg.Audit.Retention), Tenants: map[string]time.Duration{}}
		for _, t := range cfg.Tenants {
			if t.AuditRetention != nil {
				p.AuditRetention.Tenants[t.Name] = time.Duration(*t.AuditRetention)
			}
		}
	}
	return p, nil
}

// engineConfig is the engine's limits policy; newLocal adds the cache
// directory and the sandbox user.
func engineConfig(cfg config.Config) engine.Config {
	e := engine.DefaultConfig()
	e.Default, e.Max = cfg.Limits.Limits.Sandbox(), cfg.Limits.Max.Sandbox()
	e.Pids = cfg.Pids
	e.DestroyAsync = true
	e.Network = cfg.Network
	e.Files.MaxFileBytes = cfg.Inputs.MaxFileMB << 20
	e.Files.FetchTimeout = time.Duration(cfg.Inputs.FetchTimeout)
	e.Files.Client = netpolicy.Guard{AllowPrivate: cfg.Inputs.AllowPrivate}.Client(e.Files.FetchTimeout)
	e.Files.ArtifactTTL = time.Duration(cfg.Files.ArtifactTTL)
	e.SummaryChars = cfg.Summary.MaxChars
	return e
}

// sessionConfigs bounds workspace sessions and live sandboxes, which share
// the [sessions] settings.
func sessionConfigs(cfg config.Config) (session.Config, live.Config) {
	s := session.DefaultConfig()
	s.DefaultTTL, s.MaxTTL = time.Duration(cfg.Sessions.DefaultTTL), time.Duration(cfg.Sessions.MaxTTL)
	s.DefaultDiskMB, s.MaxDiskMB = cfg.Sessions.DiskMB, cfg.Sessions.MaxDiskMB
	l := live.DefaultConfig()
	l.DefaultTimeout, l.MaxTimeout = time.Duration(cfg.Sessions.SandboxTimeout), time.Duration(cfg.Sessions.MaxTTL)
	l.DefaultDiskMB, l.MaxDiskMB = cfg.Sessions.DiskMB, cfg.Sessions.MaxDiskMB
	l.MaxProcesses = cfg.Sessions.MaxProcesses
	l.PausedTTL = time.Duration(cfg.Sessions.PausedTTL)
	l.PauseAfterIdle = time.Duration(cfg.Sessions.PauseAfterIdle)
	return s, l
}

// poolConfig is the warm pool's classes and bounds.
func poolConfig(cfg config.Config) pool.Config {
	pc := pool.DefaultConfig()
	pc.MaxUses = cfg.Pool.MaxUses
	pc.IdleTimeout = time.Duration(cfg.Pool.IdleTimeout)
	for _, w := range cfg.Pool.Warm {
		pc.Warm = append(pc.Warm, pool.Warm{Image: w.Image, Tier: runtime.Tier(w.Tier), Language: w.Language,
			MinIdle: w.MinIdle, MaxIdle: w.MaxIdle, Zygote: w.Zygote, Preload: w.Preload, System: w.System})
	}
	return pc
}

// tenants are the configured tenants, and --api-key's: a key of the
// tenant "default" (made if the file has none), whose callbacks it signs
// unless --callback-secret is given.
func tenants(cfg config.Config) []api.Tenant {
	var ts []api.Tenant
	for _, t := range cfg.Tenants {
		ts = append(ts, api.Tenant{Name: t.Name, KeyHashes: t.APIKeySHA256, CallbackSecret: []byte(t.CallbackSecret)})
	}
	if cfg.APIKey == "" {
		return ts
	}
	for i := range ts {
		if ts[i].Name == "default" {
			ts[i].KeyHashes = append(ts[i].KeyHashes, api.HashKey(cfg.APIKey))
			return ts
		}
	}
	secret := cfg.CallbackSecret
	if secret == "" {
		secret = cfg.APIKey
	}
	return append(ts, api.Tenant{Name: "default", KeyHashes: []string{api.HashKey(cfg.APIKey)}, CallbackSecret: []byte(secret)})
}

// storeBackend: a postgres:// URL, else SQLite at the path given or in the
// data dir.
func storeBackend(cfg config.Config) backend {
	switch u := cfg.Store; {
	case strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://"):
		return backend{Kind: "postgres", URL: u}
	case u == "":
		return backend{Kind: "sqlite", URL: filepath.Join(cfg.DataDir, "corral.db")}
	default:
		return backend{Kind: "sqlite", URL: u}
	}
}

// stateBackend: in memory, or Redis.
func stateBackend(cfg config.Config) (backend, error) {
	switch u := cfg.State; {
	case u == "" || u == "memory" || u == "memory://":
		return backend{Kind: "memory"}, nil
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
		return backend{Kind: "redis", URL: u}, nil
	default:
		return backend{}, fmt.Errorf("state %q: use memory or a redis:// URL", u)
	}
}

// blobBackend: a directory in the data dir whose signed links corral
// serves itself (the default), or S3-compatible storage with presigned
// links.
func blobBackend(cfg config.Config) (backend, error) {
	switch u := cfg.Blob; {
	case u == "":
		return backend{Kind: "local", URL: filepath.Join(cfg.DataDir, "blobs")}, nil
	case strings.HasPrefix(u, "s3://"):
		return backend{Kind: "s3", URL: u}, nil
	default:
		return backend{}, fmt.Errorf("blob %q: leave it empty for local storage, or give an s3:// URL", u)
	}
}

// routes are how the notifier sends each kind of delivery: callbacks
// signed with their tenant's secret (callbackSecret), and summaries to
// the memory service if there is one.
func (p *plan) routes(callbackSecret notify.Secrets) map[string]notify.Route {
	rs := map[string]notify.Route{store.KindCallback: {Client: p.Callbacks.Client(p.Notify.Timeout), Secret: callbackSecret}}
	if m := p.Memory; m != nil {
		rs[store.KindMemory] = notify.Route{Client: m.Guard.Client(p.Notify.Timeout), Secret: func(string) []byte { return m.Secret }}
	}
	return rs
}
