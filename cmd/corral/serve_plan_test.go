package main

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

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
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// testConfig is a loaded configuration whose derived values are set, as
// Validate leaves them.
func testConfig() config.Config {
	c := config.Default()
	c.DataDir = "/data"
	c.NodeID, c.AdvertiseAddress, c.PublicURL = "n1", "10.0.0.1:8080", "https://corral.example"
	c.MaxConcurrency, c.QueueBound = 8, 32
	return c
}

func TestPlanBackends(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		store, state, blob             string
		wantStore, wantState, wantBlob backend
		err                            bool
	}{
		{name: "defaults", state: "memory",
			wantStore: backend{"sqlite", "/data/corral.db"}, wantState: backend{Kind: "memory"}, wantBlob: backend{"local", "/data/blobs"}},
		{name: "empty state is memory", wantStore: backend{"sqlite", "/data/corral.db"}, wantState: backend{Kind: "memory"},
			wantBlob: backend{"local", "/data/blobs"}},
		{name: "memory URL", state: "memory://", wantStore: backend{"sqlite", "/data/corral.db"}, wantState: backend{Kind: "memory"},
			wantBlob: backend{"local", "/data/blobs"}},
		{name: "a SQLite path", store: "/srv/c.db", wantStore: backend{"sqlite", "/srv/c.db"}, wantState: backend{Kind: "memory"},
			wantBlob: backend{"local", "/data/blobs"}},
		{name: "cluster backends", store: "postgres://u:p@db/corral", state: "redis://cache:6379/0", blob: "s3://bucket/prefix",
			wantStore: backend{"postgres", "postgres://u:p@db/corral"},
			// Every follower of an event stream holds a connection:
			// at least 256, or four per execution slot.
			wantState: backend{"redis", "redis://cache:6379/0?pool_size=256"}, wantBlob: backend{"s3", "s3://bucket/prefix"}},
		{name: "postgresql scheme, URL with a query", store: "postgresql://db/c", state: "rediss://cache:6380/0?prefix=c:",
			wantStore: backend{"postgres", "postgresql://db/c"}, wantState: backend{"redis", "rediss://cache:6380/0?prefix=c:&pool_size=256"},
			wantBlob: backend{"local", "/data/blobs"}},
		{name: "the URL's pool size stands", state: "redis://cache/0?pool_size=9", wantStore: backend{"sqlite", "/data/corral.db"},
			wantState: backend{"redis", "redis://cache/0?pool_size=9"}, wantBlob: backend{"local", "/data/blobs"}},
		{name: "unknown state", state: "etcd://x", err: true},
		{name: "unknown blob", blob: "gs://bucket", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			c.Store, c.State, c.Blob = tc.store, tc.state, tc.blob
			p, err := planServe(c)
			if tc.err {
				if err == nil {
					t.Fatalf("planned %+v / %+v; want an error", p.State, p.Blob)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Store != tc.wantStore || p.State != tc.wantState || p.Blob != tc.wantBlob {
				t.Errorf("store %+v, state %+v, blob %+v; want %+v, %+v, %+v", p.Store, p.State, p.Blob, tc.wantStore, tc.wantState, tc.wantBlob)
			}
		})
	}
}

// TestPlanRedisPoolScales: a node of many slots gets four connections a
// slot.
func TestPlanRedisPoolScales(t *testing.T) {
	c := testConfig()
	c.State, c.MaxConcurrency = "redis://cache/0", 100
	p, err := planServe(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := "redis://cache/0?pool_size=400"; p.State.URL != want {
		t.Errorf("state URL %q, want %q", p.State.URL, want)
	}
}

func TestPlanTenants(t *testing.T) {
	hash := api.HashKey
	fileTenants := []config.Tenant{{Name: "acme", APIKeySHA256: []string{hash("k-acme")}, CallbackSecret: "s-acme"}}
	for _, tc := range []struct {
		name        string
		tenants     []config.Tenant
		key, secret string
		want        []api.Tenant
	}{
		{name: "none", want: nil},
		{name: "the file's", tenants: fileTenants,
			want: []api.Tenant{{Name: "acme", KeyHashes: []string{hash("k-acme")}, CallbackSecret: []byte("s-acme")}}},
		{name: "--api-key makes the tenant default, signing with the key", key: "k1",
			want: []api.Tenant{{Name: "default", KeyHashes: []string{hash("k1")}, CallbackSecret: []byte("k1")}}},
		{name: "--callback-secret signs instead", key: "k1", secret: "s1",
			want: []api.Tenant{{Name: "default", KeyHashes: []string{hash("k1")}, CallbackSecret: []byte("s1")}}},
		{name: "beside the file's", tenants: fileTenants, key: "k1",
			want: []api.Tenant{{Name: "acme", KeyHashes: []string{hash("k-acme")}, CallbackSecret: []byte("s-acme")},
				{Name: "default", KeyHashes: []string{hash("k1")}, CallbackSecret: []byte("k1")}}},
		{name: "a key more for the file's default, its secret kept",
			tenants: []config.Tenant{{Name: "default", APIKeySHA256: []string{hash("k0")}, CallbackSecret: "s0"}}, key: "k1", secret: "s1",
			want: []api.Tenant{{Name: "default", KeyHashes: []string{hash("k0"), hash("k1")}, CallbackSecret: []byte("s0")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig()
			c.Tenants, c.APIKey, c.CallbackSecret = tc.tenants, tc.key, tc.secret
			p, err := planServe(c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, p.Tenants); diff != "" {
				t.Errorf("tenants (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPlanComponents: every setting reaches the component that takes it.
func TestPlanComponents(t *testing.T) {
	c := testConfig()
	c.Listen = "0.0.0.0:9000"
	c.DrainTimeout = config.Duration(42 * time.Second)
	c.MaxBodyBytes = 1 << 20
	c.Pids = 300
	c.Limits.Limits = config.Limits{TimeoutMS: 10_000, MemoryMB: 256, CPUCores: 0.5, DiskMB: 512}
	c.Limits.Max = config.Limits{TimeoutMS: 60_000, MemoryMB: 1024, CPUCores: 2, DiskMB: 2048}
	c.Network = netpolicy.Policy{Allow: []string{"*.example.com"}}
	c.Inputs.MaxFileMB, c.Inputs.FetchTimeout = 7, config.Duration(9*time.Second)
	c.Files.ArtifactTTL = config.Duration(time.Hour)
	c.Summary.MaxChars = 4000
	c.Cluster.Heartbeat, c.Cluster.LostAfter = config.Duration(3*time.Second), config.Duration(30*time.Second)
	c.Callbacks.MaxAttempts, c.Callbacks.BaseDelay, c.Callbacks.AllowPrivate = 3, config.Duration(2*time.Second), true
	c.Memory.URL, c.Memory.Secret = "https://memory.example/v1", "m-secret"
	c.Sessions.DefaultTTL, c.Sessions.MaxTTL = config.Duration(2*time.Hour), config.Duration(48*time.Hour)
	c.Sessions.DiskMB, c.Sessions.MaxDiskMB = 256, 4096
	c.Sessions.ReapInterval = config.Duration(10 * time.Second)
	c.Sessions.SandboxTimeout, c.Sessions.MaxProcesses = config.Duration(10*time.Minute), 16
	c.Sessions.PausedTTL, c.Sessions.PauseAfterIdle = config.Duration(72*time.Hour), config.Duration(10*time.Minute)
	c.Pool.MaxUses, c.Pool.IdleTimeout = 5, config.Duration(time.Minute)
	c.Pool.Warm = []config.PoolWarm{
		{Image: "python", Tier: "gvisor", Language: "python", MinIdle: 1, MaxIdle: 4, Zygote: true, Preload: []string{"numpy"}},
		{Tier: "container", Language: "bash", MaxIdle: 2},
	}
	c.E2B.Domain, c.E2B.Tier = "sandboxes.example.com", "gvisor"
	p, err := planServe(c)
	if err != nil {
		t.Fatal(err)
	}

	wantEngine := engine.DefaultConfig()
	wantEngine.Default = sandbox.Limits{TimeoutMS: 10_000, MemoryMB: 256, CPUCores: 0.5, DiskMB: 512}
	wantEngine.Max = sandbox.Limits{TimeoutMS: 60_000, MemoryMB: 1024, CPUCores: 2, DiskMB: 2048}
	wantEngine.Pids, wantEngine.DestroyAsync, wantEngine.Network = 300, true, c.Network
	wantEngine.Files.MaxFileBytes, wantEngine.Files.FetchTimeout, wantEngine.Files.ArtifactTTL = 7<<20, 9*time.Second, time.Hour
	wantEngine.SummaryChars = 4000
	if diff := cmp.Diff(wantEngine, p.Engine, cmpopts.IgnoreFields(engine.FilesConfig{}, "Client")); diff != "" {
		t.Errorf("engine (-want +got):\n%s", diff)
	}
	if p.Engine.Files.Client == nil || p.Engine.Files.Client.Timeout != 9*time.Second {
		t.Errorf("input downloads' client %+v: want one bounded by fetch_timeout", p.Engine.Files.Client)
	}

	wantPool := pool.DefaultConfig()
	wantPool.MaxUses, wantPool.IdleTimeout = 5, time.Minute
	wantPool.Warm = []pool.Warm{
		{Image: "python", Tier: runtime.TierGVisor, Language: "python", MinIdle: 1, MaxIdle: 4, Zygote: true, Preload: []string{"numpy"}},
		{Tier: runtime.TierContainer, Language: "bash", MaxIdle: 2},
	}
	wantNotify := notify.DefaultConfig()
	wantNotify.MaxAttempts, wantNotify.BaseDelay = 3, 2*time.Second
	wantNode := node.DefaultConfig()
	wantNode.MaxConcurrency, wantNode.QueueBound, wantNode.MemoryURL = 8, 32, "https://memory.example/v1"
	wantSessions := session.DefaultConfig()
	wantSessions.DefaultTTL, wantSessions.MaxTTL, wantSessions.DefaultDiskMB, wantSessions.MaxDiskMB = 2*time.Hour, 48*time.Hour, 256, 4096
	wantLive := live.DefaultConfig()
	wantLive.DefaultTimeout, wantLive.MaxTimeout, wantLive.DefaultDiskMB, wantLive.MaxDiskMB = 10*time.Minute, 48*time.Hour, 256, 4096
	wantLive.MaxProcesses, wantLive.PausedTTL, wantLive.PauseAfterIdle = 16, 72*time.Hour, 10*time.Minute

	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"listen", p.Listen, "0.0.0.0:9000"},
		{"drain timeout", p.DrainTimeout, 42 * time.Second},
		{"api", p.API, api.Config{MaxBodyBytes: 1 << 20}},
		{"public URL", p.PublicURL, "https://corral.example"},
		{"local", p.Local, c.Local},
		{"cluster", p.Cluster, cluster.Config{ID: "n1", Address: "10.0.0.1:8080", Heartbeat: 3 * time.Second, LostAfter: 30 * time.Second}},
		{"pool", p.Pool, wantPool},
		{"notify", p.Notify, wantNotify},
		{"callbacks", p.Callbacks, netpolicy.Guard{AllowPrivate: true}},
		{"memory", p.Memory, &memoryRoute{Secret: []byte("m-secret")}},
		{"node", p.Node, wantNode},
		{"workspaces", p.Workspaces, workspace.Config{Dir: "/data/sessions", ReapInterval: 10 * time.Second}},
		{"sessions", p.Sessions, wantSessions},
		{"sandboxes", p.Sandboxes, wantLive},
		{"e2b", p.E2B, e2bPlan{Domain: "sandboxes.example.com", Tier: sandbox.Isolation("gvisor")}},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.what, diff)
		}
	}
}

// TestPlanRoutes: callbacks are signed with their tenant's secret; the
// memory service's route exists only when it is configured, signed with
// its own secret.
func TestPlanRoutes(t *testing.T) {
	tenantSecret := func(tenant string) []byte { return []byte("cb-" + tenant) }
	c := testConfig()
	p, err := planServe(c)
	if err != nil {
		t.Fatal(err)
	}
	rs := p.routes(tenantSecret)
	if got := slices.Sorted(maps.Keys(rs)); !slices.Equal(got, []string{store.KindCallback}) {
		t.Fatalf("routes without a memory service: %v", got)
	}
	cb := rs[store.KindCallback]
	if cb.Client == nil || cb.Client.Timeout != p.Notify.Timeout || string(cb.Secret("acme")) != "cb-acme" {
		t.Errorf("callback route: client %+v, secret %q", cb.Client, cb.Secret("acme"))
	}

	c.Memory.URL, c.Memory.Secret = "https://memory.example", "m"
	if p, err = planServe(c); err != nil {
		t.Fatal(err)
	}
	rs = p.routes(tenantSecret)
	mr, ok := rs[store.KindMemory]
	if !ok || mr.Client == nil || string(mr.Secret("acme")) != "m" || string(mr.Secret("other")) != "m" {
		t.Errorf("memory route %+v (present %v): want one signed with memory.secret for every tenant", mr, ok)
	}
}

// TestCleanup: the steps run last first, each once, their errors joined.
func TestCleanup(t *testing.T) {
	var ran []string
	errB := errors.New("b failed")
	var cu cleanup
	cu.AddFunc(func() { ran = append(ran, "a") })
	cu.Add(func() error { ran = append(ran, "b"); return errB })
	cu.AddFunc(func() { ran = append(ran, "c") })
	if err := cu.Clean(); !errors.Is(err, errB) {
		t.Errorf("Clean = %v, want %v in it", err, errB)
	}
	if err := cu.Clean(); err != nil {
		t.Errorf("second Clean = %v, want nil", err)
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(ran, want) {
		t.Errorf("ran %v, want %v", ran, want)
	}
}

// TestPlanAudit: the trail's writer, sink and each tenant's retention
// (its own, else [audit] retention; "0s" keeps for ever); off, no writer.
func TestPlanAudit(t *testing.T) {
	c := testConfig()
	month, never := config.Duration(720*time.Hour), config.Duration(0)
	c.Tenants = []config.Tenant{{Name: "acme", AuditRetention: &month}, {Name: "keep", AuditRetention: &never}, {Name: "other"}}
	c.Audit.Retention, c.Audit.Sink, c.Audit.Queue, c.Audit.Batch = config.Duration(8760*time.Hour), "/var/log/a.jsonl", 5, 3
	p, err := planServe(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Audit == nil || p.Audit.Queue != 5 || p.Audit.Batch != 3 || p.AuditSink != "/var/log/a.jsonl" {
		t.Fatalf("audit plan %+v, sink %q", p.Audit, p.AuditSink)
	}
	for tenant, want := range map[string]time.Duration{"acme": 720 * time.Hour, "keep": 0, "other": 8760 * time.Hour, "default": 8760 * time.Hour} {
		if got := p.AuditRetention.For(tenant); got != want {
			t.Errorf("retention of %s: %s, want %s", tenant, got, want)
		}
	}
	c.Audit.Enabled = false
	if p, err := planServe(c); err != nil || p.Audit != nil {
		t.Fatalf("audit off: %+v, %v", p.Audit, err)
	}
}
