// Package workspace keeps the disks that this node's workspace sessions
// (internal/session) and live sandboxes (internal/live) hold their files
// on. Both share one id space per tenant, and each id has here: a
// directory (its disk image, its record session.json), a lock held by
// whoever uses it, an expiry (a workspace past it is gone even before the
// reaper removes it), this node's ownership of the id in the cluster
// (Owner), and what runs on it (its Occupant: a session's kept sandbox, a
// live sandbox's running part), stopped before its files go. Neither kind
// is known here beyond its record: a live sandbox's is kept as it was
// given (Workspace.LiveRecord).
package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

// Errors, shared by sessions and live sandboxes.
var (
	ErrNotFound = fault.New(fault.NotFound, "no such sandbox or session (it may have reached its timeout)")
	// ErrInvalid: a bad TTL, quota, path or field; Invalid's message
	// says which.
	ErrInvalid = fault.New(fault.InvalidArgument, "the request is invalid")
	// ErrElsewhere: another node owns the id (it was made there
	// meanwhile); the caller may retry, which reaches that node.
	ErrElsewhere = &fault.Error{Kind: fault.Unavailable, Code: "session_unavailable", Field: "session_id",
		RetryAfter: time.Second, Message: "it was just created on another node; retry"}
)

// Invalid is an ErrInvalid worded for the caller, the field named in
// its words.
func Invalid(format string, args ...any) error {
	return ErrInvalid.With("", format, args...)
}

// Owner records which node owns each id (cluster.Cluster).
type Owner interface {
	// Own reports whether this node owns (tenant, id), making it this
	// node's if no node does.
	Own(ctx context.Context, tenant, id string) (bool, error)
	// Disown gives up this node's ownership of an id it removed.
	Disown(ctx context.Context, tenant, id string) error
}

// Info describes a workspace: the public description of a session (the
// answer of GET /v1/sessions/{id}) and the tenant it is of.
type Info struct {
	sandbox.Session
	Tenant string `json:"-"`
}

// Occupant is what runs on a workspace.
type Occupant interface {
	// Stop tears it down; the workspace's lock is held, and its files go
	// next.
	Stop()
}

// Live is a live sandbox's occupant, as a session's calls for its id use
// it (an execution with its id as session_id, the session file routes).
type Live interface {
	Occupant
	// Lend lends the running sandbox to one execution. The workspace's
	// lock is held and passes to the lease, which lets it go on release;
	// on error it is let go.
	Lend(ctx context.Context) (*fleet.Lease, error)
	// Agent returns the running sandbox's agent, for file operations
	// beside what runs in it.
	Agent(ctx context.Context) (*agent.Client, error)
}

// Config places and reaps workspaces.
type Config struct {
	// Dir holds one directory per tenant/id.
	Dir string
	// ReapInterval is how often expired workspaces are removed.
	ReapInterval time.Duration
}

// Table is this node's workspaces. It is safe for concurrent use.
type Table struct {
	cfg   Config
	owner Owner
	log   *slog.Logger
	// Now is the clock (tests set it before use).
	Now func() time.Time

	mu sync.Mutex
	ws map[string]*Workspace // by tenant/id
}

// Workspace is one tenant/id.
type Workspace struct {
	key, dir string
	lock     chan struct{} // one holder at a time; a channel so waits honour ctx

	// Guarded by Table.mu:
	info Info
	live json.RawMessage // a live sandbox's record; never unset
	occ  Occupant
	gone bool // removed or expired
}

// Key is "tenant/id", for logs.
func (w *Workspace) Key() string { return w.key }

// Dir is the workspace's directory.
func (w *Workspace) Dir() string { return w.dir }

// Disk is the path of its disk image.
func (w *Workspace) Disk() string { return filepath.Join(w.dir, "disk.img") }

// Unlock lets go of the lock Lock (or Table.Lock) took.
func (w *Workspace) Unlock() { <-w.lock }

// TryLock takes the lock if it is free.
func (w *Workspace) TryLock() bool {
	select {
	case w.lock <- struct{}{}:
		return true
	default:
		return false
	}
}

// record is what session.json holds.
type record struct {
	Info
	Live json.RawMessage `json:"live,omitempty"`
}

func key(tenant, id string) string { return tenant + "/" + id }

// Open returns the table of the workspaces in cfg.Dir (a restart): those
// the owner gives to another node (a client deleted it, or made it anew
// elsewhere, while this node was away) are removed.
func Open(ctx context.Context, cfg Config, owner Owner, log *slog.Logger) (*Table, error) {
	t := &Table{cfg: cfg, owner: owner, log: log, Now: time.Now, ws: map[string]*Workspace{}}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sessions dir: %w", err)
	}
	tenants, _ := os.ReadDir(cfg.Dir)
	for _, tn := range tenants {
		ids, _ := os.ReadDir(filepath.Join(cfg.Dir, tn.Name()))
		for _, id := range ids {
			dir := filepath.Join(cfg.Dir, tn.Name(), id.Name())
			b, err := os.ReadFile(filepath.Join(dir, "session.json"))
			if err != nil {
				continue
			}
			var rec record
			if json.Unmarshal(b, &rec) != nil {
				continue
			}
			info := rec.Info
			info.Tenant = tn.Name()
			k := key(info.Tenant, info.ID)
			mine, err := owner.Own(ctx, info.Tenant, info.ID)
			if err != nil {
				// Kept: removing a workspace for a store that is down would
				// lose it for nothing.
				log.Warn("check a session's owner", "session", k, "err", err)
			} else if !mine {
				log.Info("session owned by another node; removing this copy", "session", k)
				if err := os.RemoveAll(dir); err != nil {
					log.Warn("remove session", "session", k, "err", err)
				}
				continue
			}
			w := t.newWorkspace(info)
			w.live = rec.Live
			t.ws[w.key] = w
		}
	}
	return t, nil
}

func (t *Table) newWorkspace(info Info) *Workspace {
	return &Workspace{key: key(info.Tenant, info.ID), dir: t.Dir(info.Tenant, info.ID),
		lock: make(chan struct{}, 1), info: info}
}

// Dir is the directory workspace (tenant, id) has or would have.
func (t *Table) Dir(tenant, id string) string { return filepath.Join(t.cfg.Dir, tenant, id) }

// Own asks the owner for (tenant, id): ErrElsewhere when another node
// owns it.
func (t *Table) Own(ctx context.Context, tenant, id string) error {
	mine, err := t.owner.Own(ctx, tenant, id)
	if err != nil {
		return err
	}
	if !mine {
		return ErrElsewhere
	}
	return nil
}

// Get returns workspace (tenant, id) unless it is gone or expired.
func (t *Table) Get(tenant, id string) (*Workspace, Info, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.ws[key(tenant, id)]
	if !ok || w.gone || t.Now().After(w.info.ExpiresAt) {
		return nil, Info{}, false
	}
	return w, w.info, true
}

// Lookup returns workspace (tenant, id) unless it is gone, expired or
// not.
func (t *Table) Lookup(tenant, id string) (*Workspace, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.ws[key(tenant, id)]
	if !ok || w.gone {
		return nil, false
	}
	return w, true
}

// Put adds a new workspace described by info (tenant and id included),
// a live sandbox's when live is set, with occ running on it, and saves
// it; nil and false when one that is not gone has the id already.
func (t *Table) Put(info Info, live any, occ Occupant) (*Workspace, bool, error) {
	w := t.newWorkspace(info)
	w.occ = occ
	if live != nil {
		b, err := json.Marshal(live)
		if err != nil {
			return nil, false, fmt.Errorf("save session: %w", err)
		}
		w.live = b
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if o, ok := t.ws[w.key]; ok && !o.gone {
		return nil, false, nil
	}
	t.ws[w.key] = w
	return w, true, t.saveLocked(w)
}

// Update changes w's description with f and saves it; it returns what it
// became.
func (t *Table) Update(w *Workspace, f func(*Info)) (Info, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(&w.info)
	return w.info, t.saveLocked(w)
}

// SetLive replaces w's live sandbox record and saves it.
func (t *Table) SetLive(w *Workspace, live any) error {
	b, err := json.Marshal(live)
	if err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	w.live = b
	return t.saveLocked(w)
}

// State is what a workspace is at one moment.
type State struct {
	Info Info
	// Live is its live sandbox's record (nil: a session's).
	Live json.RawMessage
	// Occupant is what runs on it (nil: nothing).
	Occupant Occupant
	// Gone: it was removed. Expired: it is past its expiry (now).
	Gone, Expired bool
}

// State returns what w is now.
func (t *Table) State(w *Workspace) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	return State{Info: w.info, Live: w.live, Occupant: w.occ, Gone: w.gone, Expired: t.Now().After(w.info.ExpiresAt)}
}

// SetOccupant makes o what runs on w (nil: nothing).
func (t *Table) SetOccupant(w *Workspace, o Occupant) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w.occ = o
}

// Do runs f with w's state guarded, unless w is gone (ErrNotFound): what
// f writes in w's directory is not written after a removal took it.
func (t *Table) Do(w *Workspace, f func() error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.gone {
		return ErrNotFound
	}
	return f()
}

// Each returns the workspaces of tenant ("" for every tenant) that are
// not gone nor expired.
func (t *Table) Each(tenant string) []*Workspace { return t.list(tenant, false) }

// All returns every workspace that is not gone, expired ones included.
func (t *Table) All() []*Workspace { return t.list("", true) }

func (t *Table) list(tenant string, expired bool) []*Workspace {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.Now()
	var out []*Workspace
	for _, w := range t.ws {
		if (tenant == "" || w.info.Tenant == tenant) && !w.gone && (expired || !now.After(w.info.ExpiresAt)) {
			out = append(out, w)
		}
	}
	return out
}

func (t *Table) saveLocked(w *Workspace) error {
	if err := os.MkdirAll(w.dir, 0o700); err != nil {
		return fmt.Errorf("create session dir: %w", err)
	}
	b, _ := json.Marshal(record{Info: w.info, Live: w.live})
	tmp := filepath.Join(w.dir, "session.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(w.dir, "session.json")); err != nil {
		return fmt.Errorf("save session: %w", err)
	}
	return nil
}

// Lock returns workspace (tenant, id) with its lock taken, expired or not.
func (t *Table) Lock(ctx context.Context, tenant, id string) (*Workspace, error) {
	t.mu.Lock()
	w, ok := t.ws[key(tenant, id)]
	t.mu.Unlock()
	if !ok {
		return nil, ErrNotFound
	}
	select {
	case w.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t.mu.Lock()
	gone := w.gone
	t.mu.Unlock()
	if gone {
		w.Unlock()
		return nil, ErrNotFound
	}
	return w, nil
}

// RemoveExpired removes workspace (tenant, id) if it is past its expiry,
// waiting for whoever uses it.
func (t *Table) RemoveExpired(ctx context.Context, tenant, id string) error {
	t.mu.Lock()
	w, ok := t.ws[key(tenant, id)]
	expired := ok && t.Now().After(w.info.ExpiresAt)
	t.mu.Unlock()
	if !expired {
		return nil
	}
	w, err := t.Lock(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		return nil // removed meanwhile
	}
	if err != nil {
		return err
	}
	defer w.Unlock()
	if !t.State(w).Expired {
		return nil // its user slid it
	}
	t.log.Info("session expired", "session", w.key)
	return t.Remove(w)
}

// Delete removes workspace (tenant, id) and its files; whoever uses it
// finishes first.
func (t *Table) Delete(ctx context.Context, tenant, id string) error {
	w, err := t.Lock(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer w.Unlock()
	return t.Remove(w)
}

// Remove stops what runs on w and removes its files and ownership; w's
// lock is held.
func (t *Table) Remove(w *Workspace) error {
	t.mu.Lock()
	w.gone = true
	delete(t.ws, w.key)
	occ := w.occ
	w.occ = nil
	t.mu.Unlock()
	if occ != nil {
		// Before the files go: the disk must be detached first.
		occ.Stop()
	}
	if err := os.RemoveAll(w.dir); err != nil {
		return fmt.Errorf("remove session: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Tenant and ID never change after the workspace is made.
	if err := t.owner.Disown(ctx, w.info.Tenant, w.info.ID); err != nil {
		// The ownership outlives the files: the id answers as an empty
		// session of this node until its next use or the node's restart.
		t.log.Warn("give up a removed session's ownership", "session", w.key, "err", err)
	}
	return nil
}

// Destroy tears sb, a sandbox on a workspace's disk, down through fl
// before it returns (within a minute), so that the disk is free for the
// next one; a failure is logged.
func Destroy(fl *fleet.Fleet, sb runtime.Sandbox, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fl.DestroyNow(ctx, sb); err != nil {
		log.Error("destroy a workspace's sandbox", "sandbox", sb.ID(), "err", err)
	}
}

// Run removes expired workspaces every ReapInterval until ctx ends.
func (t *Table) Run(ctx context.Context) {
	tk := time.NewTicker(t.cfg.ReapInterval)
	defer tk.Stop()
	for {
		t.Reap()
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}

// Reap removes the expired workspaces nobody uses now.
func (t *Table) Reap() {
	now := t.Now()
	var expired []*Workspace
	t.mu.Lock()
	for _, w := range t.ws {
		if now.After(w.info.ExpiresAt) {
			expired = append(expired, w)
		}
	}
	t.mu.Unlock()
	for _, w := range expired {
		if !w.TryLock() {
			continue // in use: its expiry slides at the end
		}
		t.mu.Lock()
		still := now.After(w.info.ExpiresAt)
		t.mu.Unlock()
		if still {
			if err := t.Remove(w); err != nil {
				t.log.Error("remove expired session", "session", w.key, "err", err)
			} else {
				t.log.Info("session expired", "session", w.key)
			}
		}
		w.Unlock()
	}
}
