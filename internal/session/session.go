// Package session keeps agents' multi-turn workspaces: executions with the
// same session_id share a persistent /workspace (a disk of its own, sized
// by the session's quota, internal/workspace) for a sliding TTL; they run
// one at a time; a clean sandbox is kept for the session's next execution
// or file operation; files can be listed, uploaded and downloaded; expired
// or deleted sessions leave nothing behind. A session lives on the node
// that created it, which owns it in the cluster; other nodes forward its
// calls there. An id may name a live sandbox (internal/live) instead: its
// executions and file calls then use the sandbox's running one
// (workspace.Live).
package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// Errors (shared with live sandboxes: one id space).
var (
	ErrNotFound = workspace.ErrNotFound
	// ErrInvalid: a bad TTL, quota or path; the message says which.
	ErrInvalid = workspace.ErrInvalid
	// ErrElsewhere: another node owns the session (it was made there
	// meanwhile); the caller may retry, which reaches that node.
	ErrElsewhere = workspace.ErrElsewhere
)

// Info describes a session (the answer of GET /v1/sessions/{id}).
type Info = workspace.Info

// Config bounds sessions.
type Config struct {
	// DefaultTTL and MaxTTL bound a session's idle lifetime; every use
	// slides it.
	DefaultTTL, MaxTTL time.Duration
	// DefaultDiskMB and MaxDiskMB bound a session's disk quota (its
	// /workspace and /tmp together).
	DefaultDiskMB, MaxDiskMB int64
	// MaxIdle caps the clean sandboxes kept for sessions on this node.
	MaxIdle int
	// FileLimits are the limits of the sandbox used for file operations
	// when none is kept.
	FileLimits runtime.Limits
}

// DefaultConfig: a 1 h sliding TTL (24 h at most), a 1 GiB disk (10 GiB at
// most), 32 kept sandboxes.
func DefaultConfig() Config {
	return Config{DefaultTTL: time.Hour, MaxTTL: 24 * time.Hour, DefaultDiskMB: 1024, MaxDiskMB: 10240,
		MaxIdle:    32,
		FileLimits: runtime.Limits{MemoryBytes: 128 << 20, CPUCores: 0.5, Pids: 32}}
}

// Manager keeps this node's sessions. It is safe for concurrent use.
type Manager struct {
	cfg    Config
	table  *workspace.Table
	engine *engine.Engine
	fleet  *fleet.Fleet
	log    *slog.Logger

	mu   sync.Mutex
	idle []*kept // kept sandboxes, least recently used first
}

// kept is a session's clean sandbox, kept for its next use: the occupant
// of its workspace. Its fields are guarded by Manager.mu.
type kept struct {
	m  *Manager
	w  *workspace.Workspace
	sb runtime.Sandbox
	of string // what sb was made for (see runtime.Key)
}

// Stop destroys the kept sandbox (its workspace is removed).
func (k *kept) Stop() {
	k.m.mu.Lock()
	sb := k.takeLocked()
	k.m.mu.Unlock()
	if sb != nil {
		k.m.destroy(sb)
	}
}

// takeLocked detaches the sandbox from the idle list.
func (k *kept) takeLocked() runtime.Sandbox {
	sb := k.sb
	k.sb, k.of = nil, ""
	k.m.idle = slices.DeleteFunc(k.m.idle, func(x *kept) bool { return x == k })
	return sb
}

// New returns the manager of the sessions in table.
func New(cfg Config, table *workspace.Table, eng *engine.Engine, fl *fleet.Fleet, log *slog.Logger) *Manager {
	return &Manager{cfg: cfg, table: table, engine: eng, fleet: fl, log: log}
}

// Options create or touch a session; zero fields keep the current values
// (or take the defaults).
type Options struct {
	TTL    time.Duration
	DiskMB int64
}

func (m *Manager) check(o Options) error {
	if o.TTL < 0 || o.TTL > m.cfg.MaxTTL {
		return workspace.Invalid("ttl_seconds must be between 1 and %d", int(m.cfg.MaxTTL.Seconds()))
	}
	if o.DiskMB < 0 || o.DiskMB > m.cfg.MaxDiskMB || (o.DiskMB > 0 && o.DiskMB < 16) {
		return workspace.Invalid("disk_mb must be between 16 and %d", m.cfg.MaxDiskMB)
	}
	return nil
}

// Touch creates the session if needed and slides its TTL. A session past
// its TTL is gone even before the reaper removes it: touching it removes it
// and creates a new, empty one. A session's disk quota is fixed once it has
// a disk; asking for another is an error. A live sandbox's id is touched
// too, but its timeout does not slide unless o sets a TTL.
func (m *Manager) Touch(ctx context.Context, tenant, id string, o Options) (Info, bool, error) {
	if err := m.check(o); err != nil {
		return Info{}, false, err
	}
	if err := m.table.RemoveExpired(ctx, tenant, id); err != nil {
		return Info{}, false, err
	}
	if _, ok := m.table.Lookup(tenant, id); !ok {
		// A new session is this node's only if the cluster agrees.
		if err := m.table.Own(ctx, tenant, id); err != nil {
			return Info{}, false, err
		}
	}
	now := m.table.Now().UTC()
	ttl, size := o.TTL, o.DiskMB
	if ttl == 0 {
		ttl = m.cfg.DefaultTTL
	}
	if size == 0 {
		size = m.cfg.DefaultDiskMB
	}
	info := Info{Tenant: tenant, Session: sandbox.Session{ID: id, DiskMB: size, TTLSeconds: int64(ttl.Seconds()),
		CreatedAt: now, LastUsedAt: now, ExpiresAt: now.Add(ttl)}}
	for {
		if _, created, err := m.table.Put(info, nil, nil); created || err != nil {
			return info, created, err
		}
		w, ok := m.table.Lookup(tenant, id)
		if !ok {
			continue // removed meanwhile
		}
		live := m.table.State(w).Live != nil
		var bad error
		info, err := m.table.Update(w, func(i *Info) {
			if o.DiskMB != 0 && o.DiskMB != i.DiskMB {
				bad = workspace.Invalid("the session's disk is %d MB and cannot change", i.DiskMB)
				return
			}
			if o.TTL != 0 {
				i.TTLSeconds = int64(o.TTL.Seconds())
			}
			i.LastUsedAt = now
			if !live || o.TTL != 0 {
				// A live sandbox's timeout does not slide with use.
				i.ExpiresAt = now.Add(time.Duration(i.TTLSeconds) * time.Second)
			}
		})
		if bad != nil {
			return Info{}, false, bad
		}
		return info, false, err
	}
}

// Get returns a session (or a live sandbox's workspace) unless it expired.
func (m *Manager) Get(tenant, id string) (Info, error) {
	_, info, ok := m.table.Get(tenant, id)
	if !ok {
		return Info{}, ErrNotFound
	}
	return info, nil
}

// Delete removes a session and its workspace; a running execution of it
// finishes first.
func (m *Manager) Delete(ctx context.Context, tenant, id string) error {
	return m.table.Delete(ctx, tenant, id)
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
// A live sandbox's id lends its running sandbox.
func (a Acquirer) Acquire(ctx context.Context, c fleet.Claim) (*fleet.Lease, error) {
	if _, _, err := a.m.Touch(ctx, a.tenant, a.id, Options{}); err != nil {
		return nil, err
	}
	w, err := a.m.table.Lock(ctx, a.tenant, a.id)
	if err != nil {
		return nil, err
	}
	if a.m.table.State(w).Live != nil {
		l, ok := a.m.table.State(w).Occupant.(workspace.Live)
		if !ok {
			w.Unlock()
			return nil, ErrNotFound
		}
		return l.Lend(ctx)
	}
	sb, err := a.m.sandbox(ctx, w, c)
	if err != nil {
		w.Unlock()
		return nil, err
	}
	m := a.m
	return fleet.NewLease(sb, fleet.Kept, nil, func(clean bool) {
		m.release(w, sb, c, clean)
		if _, err := m.table.Update(w, func(i *Info) {
			i.Executions++
			now := m.table.Now().UTC()
			i.LastUsedAt = now
			i.ExpiresAt = now.Add(time.Duration(i.TTLSeconds) * time.Second)
		}); err != nil {
			m.log.Warn("save session", "session", w.Key(), "err", err)
		}
		w.Unlock()
	}), nil
}

// take detaches w's kept sandbox, if any.
func (m *Manager) take(w *workspace.Workspace) (runtime.Sandbox, string) {
	k, ok := m.table.State(w).Occupant.(*kept)
	if !ok {
		return nil, ""
	}
	m.mu.Lock()
	of := k.of
	sb := k.takeLocked()
	m.mu.Unlock()
	m.table.SetOccupant(w, nil)
	return sb, of
}

// sandbox returns a sandbox on w's disk for spec: the kept one if it fits
// and is alive (with its limits updated), else a new one. w's lock is held.
func (m *Manager) sandbox(ctx context.Context, w *workspace.Workspace, c fleet.Claim) (runtime.Sandbox, error) {
	spec := c.Spec
	k := runtime.Key(c.Tier, spec)
	kept, of := m.take(w)
	disk := m.table.State(w).Info.DiskMB << 20
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
				m.log.Warn("update kept session sandbox", "session", w.Key(), "sandbox", kept.ID(), "err", err)
			}
		}
		m.destroy(kept) // detached before the disk is attached again
	}
	spec.Workspace = w.Disk()
	spec.Limits.DiskBytes = disk
	return m.fleet.Create(ctx, c.Tier, spec, c.Image, fleet.HolderSession)
}

// release keeps a clean sandbox for the session's next use (evicting the
// least recently used kept sandbox beyond MaxIdle) or destroys it.
func (m *Manager) release(w *workspace.Workspace, sb runtime.Sandbox, c fleet.Claim, clean bool) {
	if !clean {
		m.destroy(sb)
		return
	}
	m.fleet.Hold(sb, fleet.HolderSession, time.Time{})
	k := &kept{m: m, w: w, sb: sb, of: runtime.Key(c.Tier, c.Spec)}
	m.table.SetOccupant(w, k)
	m.mu.Lock()
	m.idle = append(m.idle, k)
	var evict []*kept
	for len(m.idle) > m.cfg.MaxIdle {
		evict = append(evict, m.idle[0])
		m.idle = m.idle[1:]
	}
	m.mu.Unlock()
	for _, x := range evict {
		// Only with the session's lock may its sandbox go: it might be
		// taken right now.
		if !x.w.TryLock() {
			continue
		}
		m.mu.Lock()
		old := x.sb
		x.sb, x.of = nil, ""
		m.mu.Unlock()
		if old != nil {
			m.destroy(old)
		}
		x.w.Unlock()
	}
}

// destroy tears sb down before returning, so its disk is free for the
// next one.
func (m *Manager) destroy(sb runtime.Sandbox) { workspace.Destroy(m.fleet, sb, m.log) }

// Close destroys every kept sandbox; the sessions' disks stay for the
// next start.
func (m *Manager) Close() {
	m.mu.Lock()
	var sbs []runtime.Sandbox
	for _, k := range m.idle {
		if k.sb != nil {
			sbs = append(sbs, k.sb)
		}
		k.sb, k.of = nil, ""
	}
	m.idle = nil
	m.mu.Unlock()
	for _, sb := range sbs {
		m.destroy(sb)
	}
}

// withSandbox runs f with a sandbox on the session's workspace.
func (m *Manager) withSandbox(ctx context.Context, tenant, id string, f func(c *agent.Client) error) error {
	if w, _, ok := m.table.Get(tenant, id); ok && m.table.State(w).Live != nil {
		// A live sandbox's files are its running sandbox's, used beside
		// whatever runs in it.
		l, ok := m.table.State(w).Occupant.(workspace.Live)
		if !ok {
			return ErrNotFound
		}
		c, err := l.Agent(ctx)
		if err != nil {
			return err
		}
		return f(c)
	}
	w, err := m.table.Lock(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer w.Unlock()
	if m.table.State(w).Expired {
		// Gone even before the reaper removes it (see Touch): using its
		// files would slide its TTL and bring it back.
		m.log.Info("session expired", "session", w.Key())
		if err := m.table.Remove(w); err != nil {
			return err
		}
		return ErrNotFound
	}
	c, err := m.fileSpec(ctx)
	if err != nil {
		return err
	}
	sb, err := m.sandbox(ctx, w, c)
	if err != nil {
		return err
	}
	ferr := f(sb.Agent())
	m.release(w, sb, c, true)
	_, _ = m.table.Update(w, func(i *Info) {
		now := m.table.Now().UTC()
		i.LastUsedAt = now
		i.ExpiresAt = now.Add(time.Duration(i.TTLSeconds) * time.Second)
	})
	return ferr
}

// fileSpec is the sandbox file operations get when no sandbox is kept.
func (m *Manager) fileSpec(ctx context.Context) (fleet.Claim, error) {
	p, err := m.engine.PrepareSandbox(engine.SandboxRequest{Language: "bash"})
	if err != nil {
		return fleet.Claim{}, err
	}
	spec, err := m.engine.Spec(ctx, p)
	if err != nil {
		return fleet.Claim{}, err
	}
	// Its limits are the session's configuration, not a request's.
	spec.Limits = m.cfg.FileLimits
	return p.Claim(spec), nil
}

// workspacePath maps a session file path to the sandbox's.
func workspacePath(p string) (string, error) {
	if p == "" {
		return "/workspace", nil
	}
	if err := validate.CheckInputPath(p); err != nil {
		return "", workspace.Invalid("%v", err)
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
		return workspace.Invalid("give a file path")
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
		return workspace.Invalid("give a path")
	}
	return m.withSandbox(ctx, tenant, id, func(c *agent.Client) error { return c.Remove(ctx, p) })
}
