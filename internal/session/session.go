// Package session keeps agents' multi-turn workspaces: executions with the
// same session_id share a persistent /workspace (a disk image of its own,
// sized by the session's quota) for a sliding TTL; they run one at a time;
// a clean sandbox is kept for the session's next execution or file
// operation; files can be listed, uploaded and downloaded; expired or
// deleted sessions leave nothing behind. A session lives on the node that
// created it, which holds it in the cluster's registry (Registry); other
// nodes forward its calls there.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

// Errors.
var (
	ErrNotFound = errors.New("session not found")
	// ErrInvalid: a bad TTL, quota or path; the message says which.
	ErrInvalid = errors.New("invalid session request")
	// ErrElsewhere: another node holds the session (it was made there
	// meanwhile); the caller may retry, which reaches that node.
	ErrElsewhere = errors.New("session held by another node")
)

// Config bounds sessions.
type Config struct {
	// Dir holds one directory per session: its disk image and metadata.
	Dir string
	// DefaultTTL and MaxTTL bound a session's idle lifetime; every use
	// slides it.
	DefaultTTL, MaxTTL time.Duration
	// DefaultDiskMB and MaxDiskMB bound a session's disk quota (its
	// /workspace and /tmp together).
	DefaultDiskMB, MaxDiskMB int64
	// MaxIdle caps the clean sandboxes kept for sessions on this node.
	MaxIdle int
	// ReapInterval is how often expired sessions are removed.
	ReapInterval time.Duration
	// FileLimits are the limits of the sandbox used for file operations
	// when none is kept.
	FileLimits runtime.Limits
	// DefaultTimeout is a live sandbox's lifetime when its request gives
	// none (MaxTTL bounds it).
	DefaultTimeout time.Duration
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
}

// DefaultConfig: a 1 h sliding TTL (24 h at most), a 1 GiB disk (10 GiB at
// most), 32 kept sandboxes; live sandboxes live 5 minutes unless told,
// run 64 processes at most and keep 1 MiB of each one's output.
func DefaultConfig(dir string) Config {
	return Config{Dir: dir, DefaultTTL: time.Hour, MaxTTL: 24 * time.Hour, DefaultDiskMB: 1024, MaxDiskMB: 10240,
		MaxIdle: 32, ReapInterval: 30 * time.Second,
		FileLimits:     runtime.Limits{MemoryBytes: 128 << 20, CPUCores: 0.5, Pids: 32},
		DefaultTimeout: 5 * time.Minute, MaxPids: 4096, MaxProcesses: 64, KeepEnded: 64, OutputBuffer: 1 << 20}
}

// Info describes a session (the answer of GET /v1/sessions/{id}).
type Info struct {
	ID         string    `json:"session_id"`
	Tenant     string    `json:"-"`
	DiskMB     int64     `json:"disk_mb"`
	TTLSeconds int64     `json:"ttl_seconds"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Executions counts executions run in the session.
	Executions int64 `json:"executions"`
}

// Registry records which node holds each session (cluster.Cluster).
type Registry interface {
	// HoldSession reports whether this node holds the session, making it
	// this node's if no node does.
	HoldSession(ctx context.Context, tenant, id string) (bool, error)
	// DropSession gives up this node's hold on a session it removed.
	DropSession(ctx context.Context, tenant, id string) error
	// PublishSession records the description of a session this node
	// holds (a live sandbox's), for every node to list.
	PublishSession(ctx context.Context, tenant, id string, info []byte) error
}

// Manager keeps this node's sessions. It is safe for concurrent use.
type Manager struct {
	cfg      Config
	engine   *engine.Engine
	fleet    *fleet.Fleet
	registry Registry
	pool     Taker // nil: no warm sandboxes for live sandboxes
	log      *slog.Logger
	now      func() time.Time

	mu       sync.Mutex
	sessions map[string]*entry // by tenant/id
	idle     []*entry          // kept sandboxes, least recently used first
}

// entry is one session. Its mu is held by whoever uses the workspace: an
// execution from Acquire to Release, or a file operation.
type entry struct {
	key  string
	dir  string
	lock chan struct{} // one holder at a time; a channel so waits honour ctx

	// live is set for a live sandbox (live.go); it never changes.
	live *liveState

	// Guarded by Manager.mu:
	info Info
	spec *LiveSpec       // a live sandbox's, with live
	sb   runtime.Sandbox // kept clean sandbox, if any
	sbOf string          // what sb was made for (see runtime.Key)
	gone bool            // deleted or expired

	// token is a live sandbox's access token (access.go), "" until
	// set or read from its file; guarded by Manager.mu.
	token string
}

// New returns a manager; sessions already on disk (a restart) are loaded,
// those the registry gives to another node (a client deleted it, or made
// it anew elsewhere, while this node was away) are removed.
func New(ctx context.Context, cfg Config, eng *engine.Engine, fl *fleet.Fleet, reg Registry, log *slog.Logger) (*Manager, error) {
	m := &Manager{cfg: cfg, engine: eng, fleet: fl, registry: reg, log: log, now: time.Now, sessions: map[string]*entry{}}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sessions dir: %w", err)
	}
	tenants, _ := os.ReadDir(cfg.Dir)
	for _, t := range tenants {
		ids, _ := os.ReadDir(filepath.Join(cfg.Dir, t.Name()))
		for _, id := range ids {
			dir := filepath.Join(cfg.Dir, t.Name(), id.Name())
			b, err := os.ReadFile(filepath.Join(dir, "session.json"))
			if err != nil {
				continue
			}
			var rec record
			if json.Unmarshal(b, &rec) != nil {
				continue
			}
			info := rec.Info
			info.Tenant = t.Name()
			mine, err := reg.HoldSession(ctx, info.Tenant, info.ID)
			if err != nil {
				// Kept: removing a session for a store that is down would
				// lose it for nothing.
				log.Warn("check a session's owner", "session", key(info.Tenant, info.ID), "err", err)
			} else if !mine {
				log.Info("session held by another node; removing this copy", "session", key(info.Tenant, info.ID))
				if err := os.RemoveAll(dir); err != nil {
					log.Warn("remove session", "session", key(info.Tenant, info.ID), "err", err)
				}
				continue
			}
			e := m.newEntry(info)
			if rec.Live != nil {
				// Its sandbox is made again on its next use.
				e.spec, e.live = rec.Live, newLiveState()
				e.live.lost = true
			}
			m.sessions[e.key] = e
		}
	}
	return m, nil
}

func key(tenant, id string) string { return tenant + "/" + id }

func (m *Manager) newEntry(info Info) *entry {
	return &entry{key: key(info.Tenant, info.ID), dir: filepath.Join(m.cfg.Dir, info.Tenant, info.ID),
		lock: make(chan struct{}, 1), info: info}
}

// Options create or touch a session; zero fields keep the current values
// (or take the defaults).
type Options struct {
	TTL    time.Duration
	DiskMB int64
}

func (m *Manager) check(o Options) error {
	if o.TTL < 0 || o.TTL > m.cfg.MaxTTL {
		return fmt.Errorf("%w: ttl_seconds must be between 1 and %d", ErrInvalid, int(m.cfg.MaxTTL.Seconds()))
	}
	if o.DiskMB < 0 || o.DiskMB > m.cfg.MaxDiskMB || (o.DiskMB > 0 && o.DiskMB < 16) {
		return fmt.Errorf("%w: disk_mb must be between 16 and %d", ErrInvalid, m.cfg.MaxDiskMB)
	}
	return nil
}

// Touch creates the session if needed and slides its TTL. A session past
// its TTL is gone even before the reaper removes it: touching it removes it
// and creates a new, empty one. A session's disk quota is fixed once it has
// a disk; asking for another is an error.
func (m *Manager) Touch(ctx context.Context, tenant, id string, o Options) (Info, bool, error) {
	if err := m.check(o); err != nil {
		return Info{}, false, err
	}
	if err := m.removeExpired(ctx, tenant, id); err != nil {
		return Info{}, false, err
	}
	m.mu.Lock()
	e, ok := m.sessions[key(tenant, id)]
	live := ok && !e.gone
	m.mu.Unlock()
	if !live {
		// A new session is this node's only if the cluster agrees.
		mine, err := m.registry.HoldSession(ctx, tenant, id)
		if err != nil {
			return Info{}, false, err
		}
		if !mine {
			return Info{}, false, ErrElsewhere
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now().UTC()
	e, ok = m.sessions[key(tenant, id)]
	created := false
	if !ok || e.gone {
		ttl := o.TTL
		if ttl == 0 {
			ttl = m.cfg.DefaultTTL
		}
		size := o.DiskMB
		if size == 0 {
			size = m.cfg.DefaultDiskMB
		}
		e = m.newEntry(Info{ID: id, Tenant: tenant, DiskMB: size, TTLSeconds: int64(ttl.Seconds()), CreatedAt: now})
		m.sessions[e.key] = e
		created = true
	} else {
		if o.DiskMB != 0 && o.DiskMB != e.info.DiskMB {
			return Info{}, false, fmt.Errorf("%w: the session's disk is %d MB and cannot change", ErrInvalid, e.info.DiskMB)
		}
		if o.TTL != 0 {
			e.info.TTLSeconds = int64(o.TTL.Seconds())
		}
	}
	e.info.LastUsedAt = now
	if e.live == nil || o.TTL != 0 {
		// A live sandbox's timeout does not slide with use.
		e.info.ExpiresAt = now.Add(time.Duration(e.info.TTLSeconds) * time.Second)
	}
	if err := m.saveLocked(e); err != nil {
		return Info{}, false, err
	}
	return e.info, created, nil
}

// record is what session.json holds.
type record struct {
	Info
	Live *LiveSpec `json:"live,omitempty"`
}

func (m *Manager) saveLocked(e *entry) error {
	if err := os.MkdirAll(e.dir, 0o700); err != nil {
		return fmt.Errorf("create session dir: %w", err)
	}
	b, _ := json.Marshal(record{Info: e.info, Live: e.spec})
	tmp := filepath.Join(e.dir, "session.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dir, "session.json")); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	return nil
}

// removeExpired removes session (tenant, id) if it is past its TTL,
// waiting for whoever uses it.
func (m *Manager) removeExpired(ctx context.Context, tenant, id string) error {
	m.mu.Lock()
	e, ok := m.sessions[key(tenant, id)]
	expired := ok && m.now().After(e.info.ExpiresAt)
	m.mu.Unlock()
	if !expired {
		return nil
	}
	e, err := m.lookup(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	defer func() { <-e.lock }()
	m.mu.Lock()
	still := m.now().After(e.info.ExpiresAt)
	m.mu.Unlock()
	if !still {
		return nil // its user slid it
	}
	m.log.Info("session expired", "session", e.key)
	return m.remove(e)
}

// Get returns a live session.
func (m *Manager) Get(tenant, id string) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.sessions[key(tenant, id)]
	if !ok || e.gone || m.now().After(e.info.ExpiresAt) {
		return Info{}, ErrNotFound
	}
	return e.info, nil
}

// lookup returns the entry of a live session and takes its lock.
func (m *Manager) lookup(ctx context.Context, tenant, id string) (*entry, error) {
	m.mu.Lock()
	e, ok := m.sessions[key(tenant, id)]
	m.mu.Unlock()
	if !ok {
		return nil, ErrNotFound
	}
	select {
	case e.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	gone := e.gone
	m.mu.Unlock()
	if gone {
		<-e.lock
		return nil, ErrNotFound
	}
	return e, nil
}

// Delete removes a session and its workspace; a running execution of it
// finishes first.
func (m *Manager) Delete(ctx context.Context, tenant, id string) error {
	e, err := m.lookup(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer func() { <-e.lock }()
	return m.remove(e)
}

// remove destroys the session's kept sandbox and files; e's lock is held.
func (m *Manager) remove(e *entry) error {
	m.mu.Lock()
	e.gone = true
	delete(m.sessions, e.key)
	sb := m.takeIdleLocked(e)
	m.mu.Unlock()
	if sb != nil {
		// Before the files go: the disk must be detached first.
		m.destroy(sb)
	}
	if ls := e.live; ls != nil {
		ls.mu.Lock()
		m.dropLocked(ls)
		ls.mu.Unlock()
	}
	if err := os.RemoveAll(e.dir); err != nil {
		return fmt.Errorf("remove session: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Tenant and ID never change after the entry is made.
	if err := m.registry.DropSession(ctx, e.info.Tenant, e.info.ID); err != nil {
		// The hold outlives the files: the id answers as an empty
		// session of this node until its next use or the node's restart.
		m.log.Warn("give up a removed session's hold", "session", e.key, "err", err)
	}
	return nil
}

// takeIdleLocked detaches e's kept sandbox from the idle list.
func (m *Manager) takeIdleLocked(e *entry) runtime.Sandbox {
	sb := e.sb
	e.sb, e.sbOf = nil, ""
	m.idle = slices.DeleteFunc(m.idle, func(x *entry) bool { return x == e })
	return sb
}

// Run removes expired sessions every ReapInterval until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.ReapInterval)
	defer t.Stop()
	for {
		m.reap()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (m *Manager) reap() {
	now := m.now()
	var expired []*entry
	m.mu.Lock()
	for _, e := range m.sessions {
		if now.After(e.info.ExpiresAt) {
			expired = append(expired, e)
		}
	}
	m.mu.Unlock()
	for _, e := range expired {
		select {
		case e.lock <- struct{}{}:
		default:
			continue // in use: its TTL slides at the end
		}
		m.mu.Lock()
		still := now.After(e.info.ExpiresAt)
		m.mu.Unlock()
		if still {
			if err := m.remove(e); err != nil {
				m.log.Error("remove expired session", "session", e.key, "err", err)
			} else {
				m.log.Info("session expired", "session", e.key)
			}
		}
		<-e.lock
	}
}

// Acquirer lends the session's sandbox to one execution at a time,
// creating the session if needed.
func (m *Manager) Acquirer(tenant, id string) Acquirer {
	return Acquirer{m: m, tenant: tenant, id: id}
}

// Acquirer lends a session's sandbox.
type Acquirer struct {
	m          *Manager
	tenant, id string
}

// Acquire waits for the session (one execution at a time) and lends its
// sandbox, fitted to c: the kept one, or a new one on the session's disk.
func (a Acquirer) Acquire(ctx context.Context, c fleet.Claim) (*fleet.Lease, error) {
	if _, _, err := a.m.Touch(ctx, a.tenant, a.id, Options{}); err != nil {
		return nil, err
	}
	e, err := a.m.lookup(ctx, a.tenant, a.id)
	if err != nil {
		return nil, err
	}
	if e.live != nil {
		l, err := a.m.acquireLive(ctx, e)
		return l, pausedInput(err)
	}
	sb, err := a.m.sandbox(ctx, e, c)
	if err != nil {
		<-e.lock
		return nil, err
	}
	m := a.m
	return fleet.NewLease(sb, true, nil, func(clean bool) {
		m.release(e, sb, c, clean)
		m.mu.Lock()
		e.info.Executions++
		now := m.now().UTC()
		e.info.LastUsedAt = now
		e.info.ExpiresAt = now.Add(time.Duration(e.info.TTLSeconds) * time.Second)
		if err := m.saveLocked(e); err != nil {
			m.log.Warn("save session", "session", e.key, "err", err)
		}
		m.mu.Unlock()
		<-e.lock
	}), nil
}

// sandbox returns a sandbox on e's disk for spec: the kept one if it fits
// and is alive (with its limits updated), else a new one. e's lock is held.
func (m *Manager) sandbox(ctx context.Context, e *entry, c fleet.Claim) (runtime.Sandbox, error) {
	spec := c.Spec
	k := runtime.Key(c.Tier, spec)
	m.mu.Lock()
	kept, of := e.sb, e.sbOf
	m.takeIdleLocked(e)
	disk := e.info.DiskMB << 20
	m.mu.Unlock()
	if kept != nil {
		alive := true
		select {
		case <-kept.Agent().Done():
			alive = false
		default:
		}
		if alive && of == k {
			err := kept.Update(ctx, spec.Limits)
			if err == nil {
				return kept, nil
			}
			// A limit below what the sandbox holds (on gVisor, memory the
			// Sentry has not yet handed back after a big program) is the
			// request's to have: a new sandbox on the same disk serves it.
			// Anything else means the kept sandbox is broken.
			if !errors.Is(err, runtime.ErrLimitBelowUsage) {
				m.log.Warn("update kept session sandbox", "session", e.key, "sandbox", kept.ID(), "err", err)
			}
		}
		m.destroy(kept) // detached before the disk is attached again
	}
	spec.Workspace = filepath.Join(e.dir, "disk.img")
	spec.Limits.DiskBytes = disk
	return m.fleet.Create(ctx, c.Tier, spec, c.Image, fleet.HolderSession)
}

// release keeps a clean sandbox for the session's next use (evicting the
// least recently used kept sandbox beyond MaxIdle) or destroys it.
func (m *Manager) release(e *entry, sb runtime.Sandbox, c fleet.Claim, clean bool) {
	if !clean {
		m.destroy(sb)
		return
	}
	m.fleet.Hold(sb, fleet.HolderSession, time.Time{})
	m.mu.Lock()
	e.sb, e.sbOf = sb, runtime.Key(c.Tier, c.Spec)
	m.idle = append(m.idle, e)
	var evict []*entry
	for len(m.idle) > m.cfg.MaxIdle {
		evict = append(evict, m.idle[0])
		m.idle = m.idle[1:]
	}
	m.mu.Unlock()
	for _, x := range evict {
		// Only with the session's lock may its sandbox go: it might be
		// taken right now.
		select {
		case x.lock <- struct{}{}:
			m.mu.Lock()
			old := x.sb
			x.sb, x.sbOf = nil, ""
			m.mu.Unlock()
			if old != nil {
				m.destroy(old)
			}
			<-x.lock
		default:
		}
	}
}

// destroy tears a session's sandbox down before returning, so its disk is
// free for the next one.
func (m *Manager) destroy(sb runtime.Sandbox) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.fleet.DestroyNow(ctx, sb); err != nil {
		m.log.Error("destroy session sandbox", "sandbox", sb.ID(), "err", err)
	}
}

// Close destroys every kept sandbox and every live sandbox's sandbox (their
// processes end); the sessions' disks stay for the next start, which makes
// live sandboxes' sandboxes again on their next use.
func (m *Manager) Close() {
	m.mu.Lock()
	var kept []runtime.Sandbox
	for _, e := range m.idle {
		if e.sb != nil {
			kept = append(kept, e.sb)
		}
		e.sb, e.sbOf = nil, ""
	}
	m.idle = nil
	var live []*liveState
	for _, e := range m.sessions {
		if e.live != nil {
			live = append(live, e.live)
		}
	}
	m.mu.Unlock()
	for _, sb := range kept {
		m.destroy(sb)
	}
	for _, ls := range live {
		ls.mu.Lock()
		m.dropLocked(ls)
		ls.mu.Unlock()
	}
}

// withSandbox runs f with a sandbox on the session's workspace.
func (m *Manager) withSandbox(ctx context.Context, tenant, id string, f func(c *agent.Client) error) error {
	if e, err := m.liveEntry(tenant, id); err == nil {
		// A live sandbox's files are its held sandbox's, used beside
		// whatever runs in it.
		sb, err := m.held(ctx, e)
		if err != nil {
			return err
		}
		return f(sb.Agent())
	}
	e, err := m.lookup(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer func() { <-e.lock }()
	m.mu.Lock()
	expired := m.now().After(e.info.ExpiresAt)
	m.mu.Unlock()
	if expired {
		// Gone even before the reaper removes it (see Touch): using its
		// files would slide its TTL and bring it back.
		m.log.Info("session expired", "session", e.key)
		if err := m.remove(e); err != nil {
			return err
		}
		return ErrNotFound
	}
	c, err := m.fileSpec(ctx)
	if err != nil {
		return err
	}
	sb, err := m.sandbox(ctx, e, c)
	if err != nil {
		return err
	}
	ferr := f(sb.Agent())
	m.release(e, sb, c, true)
	m.mu.Lock()
	now := m.now().UTC()
	e.info.LastUsedAt = now
	e.info.ExpiresAt = now.Add(time.Duration(e.info.TTLSeconds) * time.Second)
	_ = m.saveLocked(e)
	m.mu.Unlock()
	return ferr
}

// fileSpec is the sandbox file operations get when no sandbox is kept.
func (m *Manager) fileSpec(ctx context.Context) (fleet.Claim, error) {
	job, err := m.engine.Prepare(sandbox.ExecuteRequest{Language: "bash"})
	if err != nil {
		return fleet.Claim{}, err
	}
	spec, err := m.engine.Spec(ctx, job)
	if err != nil {
		return fleet.Claim{}, err
	}
	spec.Limits = m.cfg.FileLimits
	return fleet.Claim{Tier: job.Tier, Spec: spec, Image: job.Image}, nil
}

// workspacePath maps a session file path to the sandbox's.
func workspacePath(p string) (string, error) {
	if p == "" {
		return "/workspace", nil
	}
	if err := engine.CheckInputPath(p); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return "/workspace/" + p, nil
}

// List lists a directory of the session's workspace ("" is its root).
func (m *Manager) List(ctx context.Context, tenant, id, dir string) ([]agent.Entry, error) {
	p, err := workspacePath(dir)
	if err != nil {
		return nil, err
	}
	var out []agent.Entry
	err = m.withSandbox(ctx, tenant, id, func(c *agent.Client) error {
		out, err = c.List(ctx, p)
		return err
	})
	return out, err
}

// Download streams a file of the session's workspace into w.
func (m *Manager) Download(ctx context.Context, tenant, id, file string, w io.Writer) error {
	p, err := workspacePath(file)
	if err != nil {
		return err
	}
	return m.withSandbox(ctx, tenant, id, func(c *agent.Client) error { return c.ReadFile(ctx, p, w) })
}

// Upload writes r to a file of the session's workspace, creating the
// session if needed.
func (m *Manager) Upload(ctx context.Context, tenant, id, file string, r io.Reader) error {
	p, err := workspacePath(file)
	if err != nil || file == "" {
		return fmt.Errorf("%w: give a file path", ErrInvalid)
	}
	if _, _, err := m.Touch(ctx, tenant, id, Options{}); err != nil {
		return err
	}
	return m.withSandbox(ctx, tenant, id, func(c *agent.Client) error { return c.WriteFile(ctx, p, 0o644, r) })
}

// Remove removes a file or directory of the session's workspace.
func (m *Manager) Remove(ctx context.Context, tenant, id, file string) error {
	p, err := workspacePath(file)
	if err != nil || file == "" {
		return fmt.Errorf("%w: give a path", ErrInvalid)
	}
	return m.withSandbox(ctx, tenant, id, func(c *agent.Client) error { return c.Remove(ctx, p) })
}
