// Package config is corral serve's configuration: one typed struct with
// defaults, loaded from an optional TOML file and overridden by CORRAL_*
// environment variables and flags (Parse, flags.go), then validated once.
// Durations, sizes and log levels are typed: each is parsed where it is
// read, and an unreadable value is an error naming the setting.
package config

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/corralhq/corral/internal/collect"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/tracing"
	"github.com/corralhq/corral/sandbox"
)

// Limits are execution limits in the file's units.
type Limits struct {
	TimeoutMS int64   `toml:"timeout_ms"`
	MemoryMB  int64   `toml:"memory_mb"`
	CPUCores  float64 `toml:"cpu_cores"`
	DiskMB    int64   `toml:"disk_mb"`
}

// Sandbox converts to the wire type.
func (l Limits) Sandbox() sandbox.Limits {
	return sandbox.Limits{TimeoutMS: l.TimeoutMS, MemoryMB: l.MemoryMB, CPUCores: l.CPUCores, DiskMB: l.DiskMB}
}

// Tenant is a customer with its API keys (SHA-256 hashes, hex) and its
// callback signing secret.
type Tenant struct {
	Name           string   `toml:"name"`
	APIKeySHA256   []string `toml:"api_key_sha256"`
	CallbackSecret string   `toml:"callback_secret"`
	// AuditRetention keeps the tenant's audit events this long ("" or
	// unset: [audit] retention; "0s": for ever).
	AuditRetention *Duration `toml:"audit_retention"`
}

// PoolWarm is one class of warm sandboxes.
type PoolWarm struct {
	Image    string `toml:"image"`    // default: the language's default image
	Tier     string `toml:"tier"`     // container or gvisor
	Language string `toml:"language"` // default python
	MinIdle  int    `toml:"min_idle"`
	MaxIdle  int    `toml:"max_idle"`
	// Zygote pre-starts the language's interpreter (python), importing
	// Preload, and forks each execution from it.
	Zygote  bool     `toml:"zygote"`
	Preload []string `toml:"preload"`
	// System keeps live sandboxes ready (a writable system, users): only
	// a live sandbox's create takes them, and no execution does.
	System bool `toml:"system"`
}

// Local is how this machine makes sandboxes: the part of corral serve's
// configuration that corral run, doctor and image share. Its keys are the
// file's top level (and [images]).
type Local struct {
	// DataDir holds sandboxes, images and local state.
	DataDir string `toml:"data_dir"`
	// CacheDir holds warmed language build caches (default
	// DATA_DIR/cache).
	CacheDir     string `toml:"cache_dir"`
	CgroupParent string `toml:"cgroup_parent"`
	// Runc and Runsc name the runtimes (default: the pinned ones, else
	// PATH); Runsc "off" disables the gvisor tier.
	Runc  string `toml:"runc"`
	Runsc string `toml:"runsc"`
	// RunscBuildLock is the lock scripts/deps.sh holds while it builds
	// runsc (default /var/cache/corral/runsc.lock): while it is held and
	// runsc is missing, the gvisor tier is pending (503 tier_unavailable)
	// rather than unavailable, and it serves once runsc is installed.
	RunscBuildLock string `toml:"runsc_build_lock"`

	// Images configures the image store.
	Images Images `toml:"images"`
}

// Images configures the image store.
type Images struct {
	// Dir holds images (default DATA_DIR/images).
	Dir string `toml:"dir" flag:"image-dir"`
	// Budget caps the disk space of built and imported images, e.g.
	// "20GiB"; the least recently used images not in use are evicted to
	// make room.
	Budget Size `toml:"budget" flag:"image-budget"`
	// Defaults maps a language to the image its requests use when they
	// name none; unlisted languages use the host image.
	Defaults ImageMap `toml:"defaults" flag:"default-images"`
}

// DefaultLocal returns Local's defaults.
func DefaultLocal() Local {
	return Local{DataDir: "/var/lib/corral", CgroupParent: "corral", Images: Images{Budget: Size(images.DefaultBudget)}}
}

// Validate checks l.
func (l *Local) Validate() error {
	var errs []error
	if l.DataDir == "" {
		errs = append(errs, errors.New("data_dir is empty"))
	}
	if l.RunscBuildLock != "" && !filepath.IsAbs(l.RunscBuildLock) {
		errs = append(errs, fmt.Errorf("runsc_build_lock %q: an absolute path", l.RunscBuildLock))
	}
	if l.Images.Budget < 0 {
		errs = append(errs, fmt.Errorf("images.budget %s: must not be negative", l.Images.Budget))
	}
	return errors.Join(errs...)
}

// Config is everything corral serve needs. Each setting that holds one
// value is also a flag and a CORRAL_* variable, named after its key unless
// a `flag` tag names it (flags.go).
type Config struct {
	// Local's keys (data_dir, cache_dir, runc, [images], ...) are this
	// level's.
	Local

	Listen string `toml:"listen"`
	Store  string `toml:"store"` // sqlite path/URL or postgres:// URL; default sqlite in DataDir
	State  string `toml:"state"` // "memory" or redis:// URL
	Blob   string `toml:"blob"`
	NodeID string `toml:"node_id"`
	// AdvertiseAddress is where the other nodes of a cluster reach this
	// one's API ("host:port"); default: the listen address, or this host's
	// name with its port when listening on every interface.
	AdvertiseAddress string `toml:"advertise_address"`

	// MaxConcurrency is how many executions this node runs at once; 0
	// derives it from memory (see DeriveConcurrency).
	MaxConcurrency int `toml:"max_concurrency"`
	// QueueBound caps the shared queue; 0 means 4 × MaxConcurrency.
	QueueBound int `toml:"queue_bound"`
	// DrainTimeout is how long a node told to stop (SIGTERM) lets what it
	// runs finish before it ends the rest as retryable failures; what has
	// not started is handed back to the queue at once.
	DrainTimeout Duration `toml:"drain_timeout"`
	MaxBodyBytes int64    `toml:"max_body_bytes"`
	Pids         int64    `toml:"pids"`

	Limits struct {
		Limits
		Max Limits `toml:"max"`
	} `toml:"limits"`

	Tenants []Tenant `toml:"tenants"`

	// Audit is the audit trail (docs/audit.md).
	Audit struct {
		// Enabled records every action on live sandboxes and every
		// execution (default true).
		Enabled bool `toml:"enabled"`
		// Retention keeps a tenant's events this long (0: for ever);
		// [[tenants]] audit_retention overrides it per tenant.
		Retention Duration `toml:"retention"`
		// Queue bounds the events waiting to be written; beyond it they
		// are dropped, counted (corral_audit_events_total{result="dropped"})
		// and logged, after waiting FullWait for room.
		Queue    int      `toml:"queue"`
		FullWait Duration `toml:"full_wait"`
		// Batch and Flush: events are written in transactions of up to
		// Batch, at least every Flush.
		Batch int      `toml:"batch"`
		Flush Duration `toml:"flush"`
		// Sink streams stored events as JSON lines: an absolute path (or
		// file:// URL) appended to, or an http(s):// URL POSTed to.
		Sink string `toml:"sink"`
	} `toml:"audit"`

	Callbacks struct {
		// AllowPrivate lets callbacks reach private and loopback
		// addresses (tests, in-cluster receivers).
		AllowPrivate bool `toml:"allow_private"`
		MaxAttempts  int  `toml:"max_attempts"`
		// BaseDelay is the first retry's delay; each retry doubles it.
		BaseDelay Duration `toml:"base_delay"`
	} `toml:"callbacks"`

	// Summary shapes the model-ready summary every final record carries.
	Summary struct {
		// MaxChars caps it in characters (at least
		// collect.MinSummaryChars).
		MaxChars int `toml:"max_chars"`
	} `toml:"summary"`

	// Memory names a memory service that receives every finished
	// execution's summary, signed, retried and persisted like callbacks.
	Memory struct {
		// URL receives the POSTs; empty sends none.
		URL string `toml:"url"`
		// Secret signs them (Corral-Signature); required with URL.
		// CORRAL_MEMORY_SECRET overrides it.
		Secret string `toml:"secret"`
		// AllowPrivate lets URL be a private or loopback address (a
		// memory service in the same cluster).
		AllowPrivate bool `toml:"allow_private"`
	} `toml:"memory"`

	// Network is the egress policy: what requests' network.allow may
	// reach at most (empty: no network for anyone).
	Network netpolicy.Policy `toml:"network"`

	// PublicURL is how clients reach this server, for artifact links the
	// server signs itself (local blobs); default http://<listen>, or
	// https://<listen> with [tls].
	PublicURL string `toml:"public_url"`

	Files struct {
		// ArtifactTTL is how long artifact links stay valid.
		ArtifactTTL Duration `toml:"artifact_ttl"`
	} `toml:"files"`

	// Cluster is how the nodes sharing a store watch each other.
	Cluster struct {
		// Heartbeat is how often this node announces itself.
		Heartbeat Duration `toml:"heartbeat"`
		// LostAfter is how long a node may stay silent before it is lost:
		// what it ran fails as retryable, its sessions are lost (at least
		// three heartbeats).
		LostAfter Duration `toml:"lost_after"`
	} `toml:"cluster"`

	Sessions struct {
		DefaultTTL   Duration `toml:"default_ttl"`
		MaxTTL       Duration `toml:"max_ttl"`
		DiskMB       int64    `toml:"disk_mb"`
		MaxDiskMB    int64    `toml:"max_disk_mb"`
		ReapInterval Duration `toml:"reap_interval"`
		// SandboxTimeout is a live sandbox's lifetime when its request
		// gives none; MaxProcesses bounds the processes running at once in
		// one live sandbox.
		SandboxTimeout Duration `toml:"sandbox_timeout"`
		MaxProcesses   int      `toml:"max_processes"`
		// PausedTTL is how long a paused live sandbox is kept (its own
		// timeout stops while it is paused).
		PausedTTL Duration `toml:"paused_ttl"`
		// PauseAfterIdle pauses a live sandbox nobody has called for this
		// long (0: never); its next call resumes it.
		PauseAfterIdle Duration `toml:"pause_after_idle"`
		// Snapshots keeps every paused live sandbox in the blob store as
		// a snapshot too: any node of the cluster resumes it, and a
		// drain (SIGTERM) moves the node's sandboxes to the others.
		Snapshots bool `toml:"snapshots"`
	} `toml:"sessions"`

	// E2B is the E2B-compatible API (internal/e2b).
	E2B struct {
		// Domain, if set, lets {port}-{id}.{domain} hosts reach sandboxes
		// (the wildcard DNS and TLS in front are the operator's) and is
		// answered as the sandboxes' domain.
		Domain string `toml:"domain"`
		// Tier is the tier of every sandbox made through the E2B API
		// (auto, container or gvisor; default auto): E2B's SDKs have no
		// way to ask for one.
		Tier string `toml:"tier"`
	} `toml:"e2b"`

	// TLS makes the listener serve https, and the nodes of a cluster
	// forward to each other over https.
	TLS TLS `toml:"tls"`

	// Inputs bounds files[] downloads.
	Inputs struct {
		// AllowPrivate lets input URLs reach private and loopback addresses.
		AllowPrivate bool  `toml:"allow_private"`
		MaxFileMB    int64 `toml:"max_file_mb"`
		// FetchTimeout bounds one download.
		FetchTimeout Duration `toml:"fetch_timeout"`
	} `toml:"inputs"`

	// Pool keeps sandboxes ready (see internal/pool and docs/pool.md).
	Pool struct {
		// MaxUses is how many executions of one tenant a pooled sandbox
		// serves, reset between each, before it is replaced (1: a sandbox
		// per execution).
		MaxUses int `toml:"max_uses"`
		// IdleTimeout destroys sandboxes idle that long beyond min_idle,
		// and used ones.
		IdleTimeout Duration   `toml:"idle_timeout"`
		Warm        []PoolWarm `toml:"warm"`
	} `toml:"pool"`

	Log struct {
		Level  LogLevel `toml:"level"`
		Format string   `toml:"format"` // json or text
	} `toml:"log"`

	// Tracing exports OpenTelemetry traces over OTLP/HTTP
	// (docs/tracing.md); off without an endpoint.
	Tracing struct {
		// Endpoint is the collector's URL, such as
		// http://otel-collector:4318 (spans go to its /v1/traces unless
		// the URL has a path).
		Endpoint string `toml:"endpoint"`
		// SampleRatio is the share of the traces begun on this node that
		// are recorded, 0 to 1; a trace begun by the caller or another
		// node keeps its decision.
		SampleRatio float64 `toml:"sample_ratio"`
		// ServiceName is the spans' service.name (node_id is their
		// service.instance.id).
		ServiceName string `toml:"service_name"`
	} `toml:"tracing"`

	// APIKey adds one key for the tenant "default" (flag or environment
	// only, never the file); CallbackSecret signs that tenant's callbacks
	// (default: the API key itself).
	APIKey         string `toml:"-" flag:"api-key"`
	CallbackSecret string `toml:"-" flag:"callback-secret"`
}

// TLS is the listener's certificate, and what nodes verify each other
// with.
type TLS struct {
	// Cert and Key are PEM files (the certificate chain, leaf first, and
	// its key); both or neither. They are read again when they change.
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	// PeerCA is a PEM bundle of the CAs that sign the other nodes'
	// certificates (default: the system's roots).
	PeerCA string `toml:"peer_ca"`
}

// On reports whether the listener serves https.
func (t TLS) On() bool { return t.Cert != "" }

// dnsName is a lowercase DNS name of one label or more.
var dnsName = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Default returns the embedded defaults: SQLite, in-process state and local
// blobs under /var/lib/corral, listening on loopback.
func Default() Config {
	var c Config
	c.Local = DefaultLocal()
	c.Listen = "127.0.0.1:8080"
	c.State = "memory"
	c.MaxBodyBytes = 10 << 20
	c.Pids = 256
	c.Limits.Limits = Limits{TimeoutMS: 30_000, MemoryMB: 512, CPUCores: 1, DiskMB: 1024}
	c.Limits.Max = Limits{TimeoutMS: 15 * 60_000, MemoryMB: 8192, CPUCores: float64(runtime.NumCPU()), DiskMB: 10240}
	c.Callbacks.MaxAttempts = 12
	c.Audit.Enabled = true
	c.Audit.Queue = 10000
	c.Audit.Batch = 256
	c.Audit.Flush = Duration(200 * time.Millisecond)
	c.Audit.FullWait = Duration(100 * time.Millisecond)
	c.Callbacks.BaseDelay = Duration(time.Second)
	c.Summary.MaxChars = collect.DefaultSummaryChars
	c.Inputs.MaxFileMB = 100
	c.Files.ArtifactTTL = Duration(15 * time.Minute)
	c.DrainTimeout = Duration(5 * time.Minute)
	c.Cluster.Heartbeat = Duration(2 * time.Second)
	c.Cluster.LostAfter = Duration(20 * time.Second)
	c.Sessions.DefaultTTL = Duration(time.Hour)
	c.Sessions.MaxTTL = Duration(24 * time.Hour)
	c.Sessions.DiskMB = 1024
	c.Sessions.MaxDiskMB = 10240
	c.Sessions.ReapInterval = Duration(30 * time.Second)
	c.Sessions.SandboxTimeout = Duration(5 * time.Minute)
	c.Sessions.MaxProcesses = 64
	c.Sessions.PausedTTL = Duration(7 * 24 * time.Hour)
	c.Inputs.FetchTimeout = Duration(60 * time.Second)
	c.Pool.MaxUses = 1000
	c.Pool.IdleTimeout = Duration(5 * time.Minute)
	// The second class is the python image, on which the E2B SDKs'
	// default template (code-interpreter) runs: a Sandbox.create() is
	// served from it, not cold (docs/pool.md).
	c.Pool.Warm = []PoolWarm{
		{Image: images.HostName, Tier: "container", Language: "python", MinIdle: 2, MaxIdle: 16, Zygote: true},
		// Live sandboxes: /v1's python and E2B's base template (the host
		// image), E2B's code-interpreter template (the python image).
		{Image: images.HostName, Tier: "container", Language: "python", MinIdle: 1, MaxIdle: 8, System: true},
		{Image: "python", Tier: "container", Language: "python", MinIdle: 2, MaxIdle: 16, System: true},
	}
	c.Log.Level = LogLevel(slog.LevelInfo)
	c.Log.Format = "json"
	c.Tracing.SampleRatio = 1
	c.Tracing.ServiceName = "corral"
	return c
}

// Load decodes a TOML file over c. Unknown keys are an error: a misspelt
// setting must not be silently ignored.
func Load(path string, c *Config) error {
	md, err := toml.DecodeFile(path, c)
	if err != nil {
		return fmt.Errorf("read config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return fmt.Errorf("config %s: unknown settings %s", path, strings.Join(keys, ", "))
	}
	return nil
}

// DeriveConcurrency applies the sizing rule of docs/production.md: a node runs
// about memory × 0.8 / default memory limit executions at once, keeping 20%
// for bursts. 24 GiB and 512 MB give 38.
func DeriveConcurrency(memTotalBytes int64, defaultMemoryMB int64) int {
	if defaultMemoryMB <= 0 {
		return 1
	}
	return max(1, int(float64(memTotalBytes)*0.8/float64(defaultMemoryMB<<20)))
}

// MemTotal reads the machine's memory from /proc/meminfo.
func MemTotal() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("read meminfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse meminfo: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

// Validate checks c and fills derived values.
func (c *Config) Validate() error {
	errs := []error{c.Local.Validate()}
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		bad("listen %q: %v", c.Listen, err)
	}
	if c.DrainTimeout < 0 {
		bad("drain_timeout %s: not negative (0: stop at once)", c.DrainTimeout)
	}
	if c.Audit.Retention < 0 || c.Audit.Queue < 0 || c.Audit.Batch < 0 || c.Audit.Flush < 0 || c.Audit.FullWait < 0 {
		bad("audit: retention, queue, batch, flush and full_wait must not be negative")
	}
	if s := c.Audit.Sink; s != "" && !strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "file:///") &&
		!strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") {
		bad("audit.sink %q: an absolute path, file:///path or an http(s) URL", s)
	}
	for _, t := range c.Tenants {
		if t.AuditRetention != nil && *t.AuditRetention < 0 {
			bad("tenant %q: audit_retention must not be negative", t.Name)
		}
	}
	if c.MaxConcurrency < 0 || c.QueueBound < 0 || c.MaxBodyBytes < 0 || c.Pids < 0 {
		bad("max_concurrency, queue_bound, max_body_bytes and pids must not be negative")
	}
	d, m := c.Limits.Limits, c.Limits.Max
	if d.TimeoutMS <= 0 || d.MemoryMB <= 0 || d.CPUCores <= 0 || d.DiskMB <= 0 {
		bad("every default limit must be positive")
	}
	if d.TimeoutMS > m.TimeoutMS || d.MemoryMB > m.MemoryMB || d.CPUCores > m.CPUCores || d.DiskMB > m.DiskMB {
		bad("default limits exceed the maximums")
	}
	if c.Summary.MaxChars < collect.MinSummaryChars {
		bad("summary.max_chars %d: at least %d", c.Summary.MaxChars, collect.MinSummaryChars)
	}
	if c.Memory.URL != "" {
		if u, err := url.Parse(c.Memory.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("memory.url %q: an http or https URL", c.Memory.URL)
		}
		if c.Memory.Secret == "" {
			bad("memory.secret is empty: memory.url needs a signing secret (or CORRAL_MEMORY_SECRET)")
		}
	}
	for _, d := range []struct {
		name string
		v    Duration
	}{{"callbacks.base_delay", c.Callbacks.BaseDelay}, {"inputs.fetch_timeout", c.Inputs.FetchTimeout},
		{"files.artifact_ttl", c.Files.ArtifactTTL}, {"sessions.default_ttl", c.Sessions.DefaultTTL},
		{"sessions.max_ttl", c.Sessions.MaxTTL}, {"sessions.reap_interval", c.Sessions.ReapInterval},
		{"sessions.sandbox_timeout", c.Sessions.SandboxTimeout}, {"sessions.paused_ttl", c.Sessions.PausedTTL},
		{"cluster.heartbeat", c.Cluster.Heartbeat}, {"pool.idle_timeout", c.Pool.IdleTimeout}} {
		if d.v <= 0 {
			bad("%s %s: must be positive", d.name, d.v)
		}
	}
	if c.Sessions.PauseAfterIdle < 0 {
		bad("sessions.pause_after_idle %s: 0 (never) or positive", c.Sessions.PauseAfterIdle)
	}
	if c.Cluster.Heartbeat > 0 && c.Cluster.LostAfter < 3*c.Cluster.Heartbeat {
		bad("cluster.lost_after %s: at least three heartbeats (%s)", c.Cluster.LostAfter, 3*c.Cluster.Heartbeat)
	}
	if c.Pool.MaxUses < 1 {
		bad("pool.max_uses must be at least 1")
	}
	for i, w := range c.Pool.Warm {
		if w.Tier != "container" && w.Tier != "gvisor" {
			bad("pool.warm[%d].tier %q: use container or gvisor", i, w.Tier)
		}
		if w.MinIdle < 0 || w.MaxIdle < w.MinIdle || w.MaxIdle > 256 {
			bad("pool.warm[%d]: need 0 <= min_idle <= max_idle <= 256", i)
		}
	}
	if c.Sessions.SandboxTimeout > c.Sessions.MaxTTL {
		bad("sessions.sandbox_timeout %s: at most sessions.max_ttl (%s)", c.Sessions.SandboxTimeout, c.Sessions.MaxTTL)
	}
	if c.Sessions.MaxProcesses < 1 || c.Sessions.MaxProcesses > 4096 {
		bad("sessions.max_processes must be between 1 and 4096")
	}
	if c.Sessions.DiskMB < 16 || c.Sessions.DiskMB > c.Sessions.MaxDiskMB {
		bad("sessions.disk_mb must be between 16 and sessions.max_disk_mb")
	}
	switch c.E2B.Tier {
	case "", "auto", "container", "gvisor":
	default:
		bad("e2b.tier %q: auto, container or gvisor", c.E2B.Tier)
	}
	if d := c.E2B.Domain; d != "" && !dnsName.MatchString(d) {
		bad("e2b.domain %q: a DNS name such as sandboxes.example.com", d)
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		bad("tls.cert and tls.key: give both or neither")
	}
	if c.TLS.PeerCA != "" && !c.TLS.On() {
		bad("tls.peer_ca %q: only with tls.cert and tls.key (nodes forward over https only when they serve it)", c.TLS.PeerCA)
	}
	for _, p := range c.Network.Allow {
		if err := netpolicy.CheckPattern(p); err != nil {
			bad("network.allow: %v", err)
		}
	}
	if _, ok := logLevels[c.Log.Level.String()]; !ok {
		bad("log.level %s: use debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		bad("log.format %q: use json or text", c.Log.Format)
	}
	if err := c.TracingConfig().Check(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxConcurrency == 0 {
		mem, err := MemTotal()
		if err != nil {
			bad("derive max_concurrency: %v", err)
		}
		c.MaxConcurrency = DeriveConcurrency(mem, d.MemoryMB)
	}
	if c.QueueBound == 0 {
		c.QueueBound = 4 * c.MaxConcurrency
	}
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.Listen
		if c.TLS.On() {
			c.PublicURL = "https://" + c.Listen
		}
	}
	if c.NodeID == "" {
		if host, err := os.Hostname(); err != nil {
			bad("node_id is empty and this host's name is unknown: %v", err)
		} else {
			c.NodeID = host + "/" + c.Listen
		}
	}
	if c.AdvertiseAddress == "" {
		c.AdvertiseAddress = advertise(c.Listen)
	} else if _, _, err := net.SplitHostPort(c.AdvertiseAddress); err != nil {
		bad("advertise_address %q: %v", c.AdvertiseAddress, err)
	}
	return errors.Join(errs...)
}

// TracingConfig is [tracing] as internal/tracing takes it, with node_id
// as the service's instance.
func (c *Config) TracingConfig() tracing.Config {
	return tracing.Config{Endpoint: c.Tracing.Endpoint, SampleRatio: c.Tracing.SampleRatio,
		ServiceName: c.Tracing.ServiceName, NodeID: c.NodeID}
}

// advertise is the address other nodes reach a node listening on listen
// at: listen itself, unless it names no host.
func advertise(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil {
			return net.JoinHostPort(name, port)
		}
	}
	return listen
}
