// Package live keeps this node's live sandboxes: a sandbox made at
// creation and held to its fixed timeout on a workspace of its own
// (internal/workspace: its disk, record, lock and expiry, and its
// ownership in the cluster), made again on its disk if it dies, with its
// egress proxy for its life. Manager creates, finds, lists and kills them;
// a *Sandbox is the handle of one, which offers its processes (a *Process
// handle each: output replayed to every reader, stdin, signals, terminal
// size, a typed exit), its files by path, its code contexts
// (internal/kernel), pause and resume, its timeout, its access token
// for E2B's in-sandbox traffic, and connections to its TCP ports
// (DialPort). This package is the only one above the
// agent that knows the agent's error kinds: it exposes them as sentinels
// (errors.go). An execution whose session_id names a live sandbox runs in
// it as one more process (Sandbox.Lend, through internal/session).
package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/tracing"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// A live sandbox's sandbox starts at once and is held for its whole life,
// never evicted nor reset. Processes started in it (process.go) run on
// between calls; executions with its id run in it as one more process; its
// timeout is fixed at creation and moved only by SetTimeout (it does not
// slide with use). If the sandbox dies, the next use makes it again on the
// same disk: the files are kept, the processes are lost (Restarts counts
// it).

// Config bounds live sandboxes.
type Config struct {
	// DefaultTimeout is a live sandbox's lifetime when its request gives
	// none; MaxTimeout bounds it.
	DefaultTimeout, MaxTimeout time.Duration
	// DefaultDiskMB and MaxDiskMB bound a sandbox's disk (its /workspace
	// and /tmp together).
	DefaultDiskMB, MaxDiskMB int64
	// MaxPids bounds a live sandbox's processes and threads.
	MaxPids int64
	// MaxProcesses bounds the processes started through the API that run
	// at once in one live sandbox; KeepEnded is how many ended ones stay
	// listed (with their output) per sandbox.
	MaxProcesses, KeepEnded int
	// OutputBuffer is how much of each process's latest output is kept for
	// clients that connect later.
	OutputBuffer int64
	// PausedTTL is how long a paused live sandbox is kept
	// (DefaultPausedTTL if zero); its own timeout stops while it is paused.
	PausedTTL time.Duration
	// PauseAfterIdle pauses a live sandbox nobody has called for this long
	// (autopause.go); 0: never.
	PauseAfterIdle time.Duration
	// MetricsEvery is how often every running sandbox's usage is read
	// (DefaultMetricsEvery if zero); MetricsKept how many readings each
	// keeps (DefaultMetricsKept if zero). See metrics.go.
	MetricsEvery time.Duration
	MetricsKept  int
	// StdinStall bounds a write to a process's stdin that cannot go on:
	// a process that takes none of its stdin for this long fails the
	// write with ErrNotReading (DefaultStdinStall if zero).
	StdinStall time.Duration
	// Snapshots is the snapshot store, in the blob store every node
	// shares: clients' snapshots (snapshots.go) and, with PauseSnapshots,
	// paused sandboxes where every node can take them up (snapstore.go);
	// nil: neither.
	Snapshots *snapshot.Store
	// PauseSnapshots: every pause also writes the sandbox to Snapshots
	// (sessions.snapshots), and sandboxes move between nodes; without it
	// a paused sandbox stays on this node's disk only.
	PauseSnapshots bool
}

// DefaultConfig: live sandboxes live 5 minutes unless told (24 h at
// most), have a 1 GiB disk (10 GiB at most), run 64 processes at most and
// keep 1 MiB of each one's output.
func DefaultConfig() Config {
	return Config{DefaultTimeout: 5 * time.Minute, MaxTimeout: 24 * time.Hour, DefaultDiskMB: 1024, MaxDiskMB: 10240,
		MaxPids: 4096, MaxProcesses: 64, KeepEnded: 64, OutputBuffer: 1 << 20}
}

// Publisher records the description of a sandbox this node owns, for
// every node's listing (cluster.Cluster).
type Publisher interface {
	PublishSandbox(ctx context.Context, tenant, id string, info []byte) error
}

// Taker hands over warm sandboxes for good (pool.Pool).
type Taker interface {
	Take(ctx context.Context, c fleet.Claim) (runtime.Sandbox, *fleet.Zygote, bool)
}

// Manager keeps this node's live sandboxes. It is safe for concurrent use.
type Manager struct {
	cfg    Config
	table  *workspace.Table
	engine *engine.Engine
	fleet  *fleet.Fleet
	pub    Publisher
	pool   Taker // nil: no warm sandboxes
	mover  Mover // nil: sandboxes do not move between nodes
	log    *slog.Logger
	moves  moves

	// mu guards every sandbox's spec and token; it is taken before the
	// table's own lock.
	mu sync.Mutex
}

// Spec is how a live sandbox is made, saved in its workspace's record.
type Spec struct {
	// Request is the creation request, defaults filled in.
	Request sandbox.CreateSandboxRequest `json:"request"`
	// Tier and Image are where the request was routed when it was made.
	Tier  string `json:"tier"`
	Image string `json:"image"`
	// Restarts counts the sandboxes made again after one died.
	Restarts int64 `json:"restarts"`
	// Paused is set while the sandbox is paused (pause.go); its Reason
	// says who paused it, and so whether its next call resumes it
	// (autopause.go).
	Paused *sandbox.SandboxPause `json:"paused,omitempty"`
	// KeepAfterTimeout is how long past its timeout a sandbox paused then
	// (Request.Lifecycle) is kept: the paused TTL when it was made. Its
	// workspace expires that much after its timeout, so that the reaper
	// never takes it before autopause.go pauses it.
	KeepAfterTimeout time.Duration `json:"keep_after_timeout,omitempty"`
}

// Sandbox is the handle of one live sandbox; it is its workspace's
// occupant.
type Sandbox struct {
	m          *Manager
	w          *workspace.Workspace
	tenant, id string

	// Guarded by Manager.mu:
	spec *Spec
	// token is its access token (access.go), "" until set or read from
	// its file.
	token string

	// mu is held while the sandbox is made or torn down, and guards:
	mu   sync.Mutex
	sb   runtime.Sandbox
	env  map[string]string // what every process starts with
	img  images.Image      // what the sandbox runs
	stop func()            // ends the egress proxy
	// contexts holds the sandbox's code contexts (contexts.go).
	contexts *kernel.Contexts
	procs    map[int]*Process // by pid, ended ones included
	// ended lists the pids of ended processes, oldest first.
	ended []int
	// lost: the sandbox was lost with this node's last run; making it
	// again counts as a restart.
	lost bool
	// moving are the processes of a sandbox paused with its memory, which
	// the resume takes up again; pauseLost counts those that ended with a
	// pause of its files only (pause.go).
	moving    []*Process
	pauseLost int

	// meter keeps its usage readings (metrics.go).
	meter meter
	// called is when a call last used it (unix ns; autopause.go).
	called atomic.Int64
}

// ID is the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Tenant is the tenant the sandbox is of.
func (s *Sandbox) Tenant() string { return s.tenant }

// Deps are what live sandboxes are made of and with. Pool may be nil (no
// warm sandboxes); the others are needed.
type Deps struct {
	// Table holds the workspaces, shared with the sessions.
	Table  *workspace.Table
	Engine *engine.Engine
	Fleet  *fleet.Fleet
	// Publisher records each sandbox's description for every node's
	// listing (cluster.Cluster).
	Publisher Publisher
	// Pool gives a new sandbox its first sandbox when one there matches
	// (pool.Pool).
	Pool Taker
	// Mover moves sandboxes' ownership between nodes (move.go); nil:
	// they stay where they were made.
	Mover Mover
	Log   *slog.Logger
}

// New returns the manager of the live sandboxes in d.Table: those on disk
// from this node's last run are made again on their next use.
func New(cfg Config, d Deps) *Manager {
	table, log := d.Table, d.Log
	m := &Manager{cfg: cfg, table: table, engine: d.Engine, fleet: d.Fleet, pub: d.Publisher, pool: d.Pool, mover: d.Mover, log: log}
	for _, w := range table.All() {
		rec := table.State(w).Live
		if rec == nil {
			continue
		}
		var spec Spec
		if err := json.Unmarshal(rec, &spec); err != nil {
			log.Warn("read a live sandbox's record", "sandbox", w.Key(), "err", err)
			continue
		}
		info := table.State(w).Info
		s := m.newSandbox(w, info.Tenant, info.ID, &spec)
		// Its sandbox is made again on its next use.
		s.lost = true
		table.SetOccupant(w, s)
	}
	return m
}

func (m *Manager) newSandbox(w *workspace.Workspace, tenant, id string, spec *Spec) *Sandbox {
	return &Sandbox{m: m, w: w, tenant: tenant, id: id, spec: spec, procs: map[int]*Process{}}
}

// NewSandboxID returns a fresh sandbox id: "sbx_", a millisecond
// timestamp and random bits.
func NewSandboxID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("sbx_%011x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// prepare validates tenant's req, fills its defaults and routes it: where
// its sandbox runs and on what.
func (m *Manager) prepare(tenant string, req *sandbox.CreateSandboxRequest) (*engine.Placement, error) {
	if req.Language == "" {
		req.Language = "bash"
	}
	if req.Limits.Pids == 0 {
		req.Limits.Pids = m.engine.Config().Pids
	}
	if req.Limits.Pids < 16 || req.Limits.Pids > m.cfg.MaxPids {
		return nil, validate.Refuse("limits.pids", "must be between 16 and %d", m.cfg.MaxPids)
	}
	if req.Limits.DiskMB == 0 {
		req.Limits.DiskMB = m.cfg.DefaultDiskMB
	}
	if req.Limits.DiskMB < 16 || req.Limits.DiskMB > m.cfg.MaxDiskMB {
		return nil, validate.Refuse("limits.disk_mb", "must be between 16 and %d", m.cfg.MaxDiskMB)
	}
	cpuField, err := validate.Renamed("limits.cpu_cores", &req.Limits.CPUCores, "limits.cpus", &req.Limits.CPUs)
	if err != nil {
		return nil, err
	}
	l := req.Limits
	p, err := m.engine.PrepareSandbox(engine.SandboxRequest{
		Tenant:   tenant,
		Language: req.Language,
		Image:    req.Image,
		Tier:     req.Tier,
		Limits:   engine.Limits{MemoryMB: l.MemoryMB, CPUCores: l.CPUCores, DiskMB: l.DiskMB, Pids: l.Pids},
		Env:      req.Env,
		Network:  req.Network,
		System:   true,
		Names:    engine.Names{CPUCores: cpuField},
	})
	if err != nil {
		return nil, err
	}
	// The tier it was routed to, not "auto": a sandbox made again is
	// made on the same tier.
	req.Language, req.Tier = p.Runner.Name(), sandbox.Tier(p.Tier)
	req.Limits.MemoryMB, req.Limits.CPUCores = p.Limits.MemoryMB, p.Limits.CPUCores
	// Answered under its old name too, for the release that accepts it.
	req.Limits.CPUs = req.Limits.CPUCores
	return p, nil
}

func (m *Manager) timeoutError() error {
	return validate.Refuse("timeout_seconds", "must be between 1 and %d", int(m.cfg.MaxTimeout.Seconds()))
}

// create makes a live sandbox of tenant and starts its sandbox (Create).
func (m *Manager) create(ctx context.Context, tenant string, req sandbox.CreateSandboxRequest) (_ *Sandbox, _ sandbox.Info, err error) {
	ctx, span := tracing.StartChild(ctx, "live.create")
	defer func() { tracing.End(span, err) }()
	if req.SandboxID == "" {
		req.SandboxID = NewSandboxID()
	} else if !validate.ValidID(req.SandboxID) {
		return nil, sandbox.Info{}, validate.Refuse("sandbox_id", validate.IDRule)
	}
	timeout := validate.Duration(req.TimeoutSeconds, time.Second)
	if timeout == 0 {
		timeout = m.cfg.DefaultTimeout
	}
	if timeout <= 0 || timeout > m.cfg.MaxTimeout {
		return nil, sandbox.Info{}, m.timeoutError()
	}
	req.TimeoutSeconds = int64(timeout.Seconds())
	if err := validate.CheckMetadata(req.Metadata); err != nil {
		return nil, sandbox.Info{}, err
	}
	if err := checkLifecycle(req.Lifecycle); err != nil {
		return nil, sandbox.Info{}, err
	}
	if req.SnapshotID != "" {
		return m.fromSnapshot(ctx, tenant, req, timeout)
	}
	p, err := m.prepare(tenant, &req)
	if err != nil {
		return nil, sandbox.Info{}, err
	}
	id := req.SandboxID
	if err := m.table.RemoveExpired(ctx, tenant, id); err != nil {
		return nil, sandbox.Info{}, err
	}
	if _, ok := m.table.Lookup(tenant, id); ok {
		return nil, sandbox.Info{}, ErrExists
	}
	if err := m.table.Own(ctx, tenant, id); errors.Is(err, workspace.ErrElsewhere) {
		return nil, sandbox.Info{}, ErrExists
	} else if err != nil {
		return nil, sandbox.Info{}, err
	}
	now := m.table.Now().UTC()
	spec := &Spec{Request: req, Tier: string(p.Tier), Image: p.Image.Name}
	if pausesAtTimeout(req.Lifecycle) {
		spec.KeepAfterTimeout = m.pausedTTL()
	}
	s := m.newSandbox(nil, tenant, id, spec)
	w, created, err := m.table.Put(workspace.Info{Tenant: tenant, Session: sandbox.Session{ID: id, DiskMB: req.Limits.DiskMB,
		TTLSeconds: req.TimeoutSeconds, CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(timeout + spec.KeepAfterTimeout)}}, spec, nil)
	switch {
	case w == nil && err != nil:
		return nil, sandbox.Info{}, err
	case w == nil || !created:
		return nil, sandbox.Info{}, ErrExists
	}
	// Its occupant once the handle knows its workspace: a session's call
	// for the id meanwhile finds no sandbox.
	s.w = w
	m.table.SetOccupant(w, s)
	if err == nil {
		_, err = s.held(ctx)
	}
	if err != nil {
		// Nothing of it may stay: not its files, nor its ownership.
		if rerr := m.table.Remove(w); rerr != nil {
			m.log.WarnContext(ctx, "remove a sandbox that could not start", "sandbox", w.Key(), "err", rerr)
		}
		return nil, sandbox.Info{}, err
	}
	m.log.InfoContext(ctx, "sandbox created", "sandbox", w.Key(), "tier", p.Tier, "image", p.Image.Name)
	info := s.Info()
	m.publish(ctx, s, info)
	return s, info, nil
}

// Get returns the handle of tenant's live sandbox id, unless it expired.
func (m *Manager) Get(tenant, id string) (*Sandbox, error) {
	w, _, ok := m.table.Get(tenant, id)
	if !ok {
		return nil, m.notHere(tenant, id)
	}
	s, ok := m.table.State(w).Occupant.(*Sandbox)
	if !ok {
		return nil, m.notHere(tenant, id)
	}
	return s, nil
}

// kill removes tenant's live sandbox id: its processes and contexts end,
// its files go. A running execution in it finishes first.
func (m *Manager) kill(ctx context.Context, tenant, id string) (err error) {
	ctx, span := tracing.StartChild(ctx, "live.kill")
	defer func() { tracing.End(span, err) }()
	w, err := m.table.Lock(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer w.Unlock()
	if m.table.State(w).Live == nil {
		return ErrNotFound // a workspace session's id
	}
	return m.table.Remove(w)
}

// List describes this node's live sandboxes of tenant, by id.
func (m *Manager) List(tenant string) []sandbox.Info {
	var out []sandbox.Info
	for _, w := range m.table.Each(tenant) {
		if s, ok := m.table.State(w).Occupant.(*Sandbox); ok {
			out = append(out, s.Info())
		}
	}
	slices.SortFunc(out, func(a, b sandbox.Info) int { return strings.Compare(a.SandboxID, b.SandboxID) })
	return out
}

// Close tears down every live sandbox's sandbox (their processes end); the
// disks stay for the next start, which makes them again on their next use.
func (m *Manager) Close() {
	for _, w := range m.table.All() {
		if s, ok := m.table.State(w).Occupant.(*Sandbox); ok {
			s.mu.Lock()
			s.dropLocked()
			s.mu.Unlock()
		}
	}
}

// Stop tears the sandbox down (its workspace is being removed): a paused
// one's snapshot goes too.
func (s *Sandbox) Stop() {
	s.mu.Lock()
	s.dropLocked()
	s.mu.Unlock()
	s.m.mu.Lock()
	snap := ""
	if p := s.spec.Paused; p != nil {
		snap = p.SnapshotID
	}
	s.m.mu.Unlock()
	s.m.dropSnapshot(context.Background(), s.w.Key(), snap)
}

// held returns the sandbox's running sandbox, making it (again, on the
// same disk) if it has none or the one it had died, and resuming it if it
// is paused and wakes on a call (autopause.go). The caller holds neither
// the workspace's lock nor s.mu, which a resume takes.
func (s *Sandbox) held(ctx context.Context) (runtime.Sandbox, error) {
	s.touch()
	for range wakeTries {
		sb, err := s.hold(ctx)
		if !errors.Is(err, ErrPaused) || !s.wakes() {
			return sb, err
		}
		if err := s.wake(ctx); err != nil {
			return nil, err
		}
	}
	return s.hold(ctx)
}

// hold is held without the resume: a paused sandbox is ErrPaused.
func (s *Sandbox) hold(ctx context.Context) (runtime.Sandbox, error) {
	m := s.m
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.table.State(s.w).Gone {
		return nil, m.notHere(s.tenant, s.id)
	}
	if s.paused() {
		return nil, ErrPaused
	}
	if s.sb != nil {
		select {
		case <-s.sb.Agent().Done():
		default:
			return s.sb, nil
		}
		m.log.Warn("a live sandbox died; making it again on its disk", "sandbox", s.w.Key(), "runtime_sandbox", s.sb.ID())
		s.dropLocked()
		m.mu.Lock()
		s.spec.Restarts++
		s.saveLocked()
		m.mu.Unlock()
	}
	m.mu.Lock()
	if s.lost {
		s.lost = false
		s.spec.Restarts++
	}
	m.mu.Unlock()
	return s.startLocked(ctx, "")
}

// saveLocked saves the spec (Manager.mu is held); a failure is logged.
func (s *Sandbox) saveLocked() {
	if err := s.m.table.SetLive(s.w, s.spec); err != nil {
		s.m.log.Warn("save sandbox", "sandbox", s.w.Key(), "err", err)
	}
}

// paused reports whether the sandbox is paused.
func (s *Sandbox) paused() bool {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.spec.Paused != nil
}

// startLocked makes the sandbox's running sandbox on its disk (s.mu is
// held): restored from the saved state in restore when it is set, else a
// new one.
func (s *Sandbox) startLocked(ctx context.Context, restore string) (runtime.Sandbox, error) {
	m := s.m
	m.mu.Lock()
	req := s.spec.Request
	m.mu.Unlock()
	p, err := m.prepare(s.tenant, &req)
	if err != nil {
		return nil, fmt.Errorf("make sandbox %s again: %w", s.w.Key(), err)
	}
	spec, err := m.engine.Spec(ctx, p)
	if err != nil {
		return nil, err
	}
	spec.Workspace = s.w.Disk()
	var sb runtime.Sandbox
	if restore != "" {
		sb, err = m.fleet.Restore(ctx, p.Tier, spec, p.Image, restore, fleet.HolderSandbox)
	} else {
		sb, err = s.makeSandbox(ctx, p, spec)
	}
	if err != nil {
		return nil, err
	}
	env := m.engine.Env(p.Image)
	// Its programs run as its user unless a process names another (for
	// which the agent sets these from the sandbox's /etc/passwd: Start).
	maps.Copy(env, userEnv)
	maps.Copy(env, req.Env)
	stop := func() {}
	if len(p.Egress) > 0 {
		if stop, err = m.engine.SandboxEgress(audit.WithSandbox(ctx, s.id), p.Egress, sb); err != nil {
			m.destroy(sb)
			return nil, err
		}
		maps.Copy(env, engine.ProxyEnv())
	}
	s.sb, s.env, s.stop, s.img = sb, env, stop, p.Image
	if restore == "" || s.contexts == nil {
		// A restored sandbox's contexts go on (Resume reattaches them).
		s.contexts = kernel.New(sb.Agent(), kernel.Options{Env: sortedEnv(env), Sandbox: s.id})
	}
	return sb, nil
}

// makeSandbox makes the running sandbox on its disk: the first one from
// the warm pool when one matches and its disk can be kept as the sandbox's
// own, else a new one.
func (s *Sandbox) makeSandbox(ctx context.Context, p *engine.Placement, spec runtime.Spec) (runtime.Sandbox, error) {
	m := s.m
	if _, err := os.Stat(spec.Workspace); m.pool != nil && errors.Is(err, os.ErrNotExist) {
		sb, _, ok := m.pool.Take(ctx, p.Claim(spec))
		if ok {
			k, can := sb.(runtime.DiskKeeper)
			if can {
				err = k.KeepDisk(spec.Workspace)
			}
			if can && err == nil {
				m.fleet.Hold(sb, fleet.HolderSandbox, time.Time{})
				return sb, nil
			}
			if err != nil {
				m.log.Warn("keep a warm sandbox's disk", "sandbox", s.w.Key(), "runtime_sandbox", sb.ID(), "err", err)
			}
			m.destroy(sb)
		}
	}
	return m.fleet.Create(ctx, p.Tier, spec, p.Image, fleet.HolderSandbox)
}

// destroy tears sb down before returning, so its disk is free for the
// next one.
func (m *Manager) destroy(sb runtime.Sandbox) { workspace.Destroy(m.fleet, sb, m.log) }

// dropLocked tears down the running sandbox (s.mu is held): its code
// contexts are closed, its processes end as their agent goes.
func (s *Sandbox) dropLocked() {
	// Processes saved with a paused sandbox end with it.
	settle(s.moving, nil, true)
	s.moving = nil
	s.closeContextsLocked()
	if s.stop != nil {
		s.stop()
	}
	if s.sb != nil {
		s.m.destroy(s.sb)
	}
	s.sb, s.stop, s.env = nil, nil, nil
}

// Info describes the sandbox.
func (s *Sandbox) Info() sandbox.Info {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	return s.infoLocked()
}

func (s *Sandbox) infoLocked() sandbox.Info {
	wi := s.m.table.State(s.w).Info
	r := s.spec.Request
	info := sandbox.Info{SandboxID: s.id, Language: r.Language, Image: s.spec.Image, Tier: s.spec.Tier,
		Limits: r.Limits, Network: r.Network, Metadata: r.Metadata, State: "running",
		TimeoutSeconds: wi.TTLSeconds, CreatedAt: wi.CreatedAt, ExpiresAt: wi.ExpiresAt.Add(-s.spec.KeepAfterTimeout),
		Executions: wi.Executions, Restarts: s.spec.Restarts, PublicPorts: r.PublicPorts, Lifecycle: lifecycleOf(r.Lifecycle)}
	if info.Limits.CPUCores == 0 {
		// Made by a server before cpu_cores was its name: cpus alone.
		info.Limits.CPUCores = info.Limits.CPUs
	}
	if p := s.spec.Paused; p != nil {
		pause := *p
		info.State, info.Pause = "paused", &pause
		// When it is dropped if never resumed.
		info.ExpiresAt = wi.ExpiresAt
	}
	return info
}

// publish records a sandbox's description in the cluster, for every
// node's listing. A failure is logged: the sandbox itself is fine, and its
// next change publishes again.
func (m *Manager) publish(ctx context.Context, s *Sandbox, info sandbox.Info) {
	b, err := json.Marshal(info)
	if err == nil {
		err = m.pub.PublishSandbox(ctx, s.tenant, s.id, b)
	}
	if err != nil {
		m.log.Warn("publish a sandbox's description", "sandbox", s.w.Key(), "err", err)
	}
}

// SetTimeout makes the sandbox end timeout from now.
func (s *Sandbox) SetTimeout(ctx context.Context, timeout time.Duration) (sandbox.Info, error) {
	m := s.m
	if timeout <= 0 || timeout > m.cfg.MaxTimeout {
		return sandbox.Info{}, m.timeoutError()
	}
	if _, err := m.Get(s.tenant, s.id); err != nil {
		return sandbox.Info{}, err
	}
	m.mu.Lock()
	if s.spec.Paused != nil {
		// Its clock is stopped; the resume sets it going again.
		m.mu.Unlock()
		return sandbox.Info{}, ErrPaused
	}
	now := m.table.Now().UTC()
	_, err := m.table.Update(s.w, func(i *workspace.Info) {
		i.TTLSeconds = int64(timeout.Seconds())
		i.LastUsedAt = now
		i.ExpiresAt = now.Add(timeout + s.spec.KeepAfterTimeout)
	})
	info := s.infoLocked()
	m.mu.Unlock()
	if err != nil {
		return sandbox.Info{}, err
	}
	m.publish(ctx, s, info)
	return info, nil
}

// Lend lends the running sandbox to one execution (its workspace's lock
// is held until the lease's release): it runs beside the sandbox's
// processes under the sandbox's limits and network, and its end hands
// nothing back.
func (s *Sandbox) Lend(ctx context.Context) (*fleet.Lease, error) {
	m := s.m
	s.touch()
	sb, err := s.hold(ctx)
	for try := 0; errors.Is(err, ErrPaused) && s.wakes() && try < wakeTries; try++ {
		// The resume takes the workspace's lock: it is let go meanwhile,
		// and taken again before the sandbox is lent.
		s.w.Unlock()
		if err = s.wake(ctx); err != nil {
			return nil, pausedInput(err)
		}
		if err = s.lock(ctx); err != nil {
			return nil, err
		}
		sb, err = s.hold(ctx)
	}
	if err != nil {
		s.w.Unlock()
		return nil, pausedInput(err)
	}
	s.mu.Lock()
	env := maps.Clone(s.env)
	img := s.img
	s.mu.Unlock()
	m.mu.Lock()
	tier := runtime.Tier(s.spec.Tier)
	m.mu.Unlock()
	l := fleet.NewLease(sb, fleet.Held, nil, func(bool) {
		// Held for the sandbox's life, not the execution's.
		m.fleet.Hold(sb, fleet.HolderSandbox, time.Time{})
		if _, err := m.table.Update(s.w, func(i *workspace.Info) {
			i.Executions++
			i.LastUsedAt = m.table.Now().UTC()
		}); err != nil {
			m.log.Warn("save sandbox", "sandbox", s.w.Key(), "err", err)
		}
		s.touch()
		s.w.Unlock()
	})
	l.Env, l.Tier, l.Image = env, tier, img
	return l, nil
}

// Agent returns the running sandbox's agent (for a session's file calls
// on the sandbox's id).
func (s *Sandbox) Agent(ctx context.Context) (*agent.Client, error) {
	sb, err := s.held(ctx)
	if err != nil {
		return nil, err
	}
	return sb.Agent(), nil
}

// userEnv is the environment of the sandbox's user (UserHome): a process
// that runs as another user has its own from the agent.
var userEnv = map[string]string{"HOME": UserHome, "USER": "user", "LOGNAME": "user"}
