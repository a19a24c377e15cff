package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/disk"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// Snapshots a client takes of its sandboxes, kept in the snapshot store
// as snapstore.go writes a paused sandbox (Sandbox.Snapshot), and the
// sandboxes made from them (Manager.Materialize, then the ordinary
// resume). A snapshot is taken without ending the sandbox:
//
//   - gVisor: the sandbox is paused with its memory (runsc checkpoint),
//     staged as a paused sandbox (its saved memory linked, its disk copied,
//     sparse), restored at once, then the staged copy is uploaded while it
//     runs on: it is stopped for the checkpoint, the copy and the restore
//     (Snapshot.PausedMS), not the upload. runsc's --leave-running would
//     keep it running during the checkpoint, but its disk would move on
//     meanwhile, away from the memory saved.
//   - runc (or a gVisor sandbox that cannot be saved): its file system is
//     frozen (FIFREEZE) while its disk image is copied, and the copy is
//     written as a sandbox paused with its files only; its processes run
//     on, their writes waiting for the copy.
//   - a paused sandbox: as its pause left it.
//
// Meta.Extra names it a client's (extraKind), with its name and the
// sandbox's language and memory, so that it is listed without reading
// its record. Snapshots are the tenant's: another tenant's is not found.
// A name names the newest of the tenant's snapshots given it; the older
// ones stay, by their ids.
//
// A sandbox made from one is made as its sandbox was (the record holds
// its request: image, tier, limits, network, which a memory restore
// needs), with the new request's id, timeout, metadata, lifecycle and
// env, and resumed: with its memory (processes, contexts and their
// variables) when the snapshot has it, else on its disk.
//
// A fork is a snapshot that is not listed, from which Count sandboxes are
// made, then deleted (its chunks stay until the store's GC).

// Keys of a snapshot's Meta.Extra beside snapstore.go's.
const (
	extraKind     = "kind"
	extraName     = "name"
	extraLanguage = "language"
	extraMemory   = "memory"
	// kindSnapshot marks a client's snapshot; kindFork one taken for a
	// fork (not listed). A pause's (MetaPause) has no kind.
	kindSnapshot = "snapshot"
	kindFork     = "fork"
)

// MaxForks bounds a fork's count.
const MaxForks = sandbox.MaxForks

// maxSnapshotName bounds a snapshot's name.
const maxSnapshotName = 64

// snapshotRestoreWait bounds the restore of a sandbox whose snapshot's
// caller went away: it is brought back whatever the caller does.
const snapshotRestoreWait = 2 * time.Minute

var (
	// ErrSnapshotNotFound: no snapshot of the tenant has this id or name.
	ErrSnapshotNotFound = &fault.Error{Kind: fault.NotFound, Code: "not_found", Field: "snapshot_id",
		Message: "no snapshot has this id or name (list them: GET /v1/snapshots)"}
)

func (m *Manager) snapStore() (*snapshot.Store, error) {
	if m.cfg.Snapshots == nil {
		return nil, ErrNoSnapshots
	}
	return m.cfg.Snapshots, nil
}

// newSnapshotID returns a fresh snapshot id: "snap_", a millisecond
// timestamp and random bits.
func newSnapshotID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("snap_%011x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// checkSnapshotName refuses a name that is not 1 to 64 letters, digits,
// '.', '_' or '-' starting with a letter or digit, or that could be taken
// for an id.
func checkSnapshotName(name string) error {
	if name == "" {
		return nil
	}
	if len(name) > maxSnapshotName || snapshot.ValidID(name) != nil {
		return validate.Refuse("name", "must be 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", maxSnapshotName)
	}
	if strings.HasPrefix(name, "snap_") {
		return validate.Refuse("name", "must not start with snap_ (snapshot ids do)")
	}
	return nil
}

// checkSnapshotRef refuses a reference to a snapshot (an id or a name)
// that none can have.
func checkSnapshotRef(field, ref string) error {
	if ref == "" || len(ref) > snapshot.MaxIDLen || snapshot.ValidID(ref) != nil {
		return validate.Refuse(field, "must be a snapshot id or name: 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", snapshot.MaxIDLen)
	}
	return nil
}

// snapshotInfo describes a stored snapshot.
func snapshotInfo(mf *snapshot.Manifest) sandbox.Snapshot {
	x := mf.Meta.Extra
	return sandbox.Snapshot{SnapshotID: mf.ID, Name: x[extraName], SandboxID: x[MetaSandbox], Language: x[extraLanguage],
		Image: mf.Meta.Image, Tier: mf.Meta.Tier, Memory: x[extraMemory] == "true",
		SizeBytes: mf.Stats.LogicalBytes, StoredBytes: mf.Stats.NewBytes, CreatedAt: mf.Created}
}

// owned reports whether mf is one of tenant's snapshots (a fork's too).
func owned(mf *snapshot.Manifest, tenant string) bool {
	k := mf.Meta.Extra[extraKind]
	return (k == kindSnapshot || k == kindFork) && mf.Meta.Extra[MetaTenant] == tenant
}

// tenantSnapshots returns tenant's listed snapshots, newest first.
func (m *Manager) tenantSnapshots(ctx context.Context, tenant string) ([]*snapshot.Manifest, error) {
	st, err := m.snapStore()
	if err != nil {
		return nil, err
	}
	all, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.DeleteFunc(all, func(mf *snapshot.Manifest) bool {
		return !owned(mf, tenant) || mf.Meta.Extra[extraKind] != kindSnapshot
	})
	slices.SortFunc(out, func(a, b *snapshot.Manifest) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return out, nil
}

// findSnapshot returns tenant's snapshot ref names: its id, or else its
// name (the newest snapshot given it). field names ref in a refusal.
func (m *Manager) findSnapshot(ctx context.Context, tenant, field, ref string) (*snapshot.Manifest, error) {
	st, err := m.snapStore()
	if err != nil {
		return nil, err
	}
	if err := checkSnapshotRef(field, ref); err != nil {
		return nil, err
	}
	mf, err := st.Get(ctx, ref)
	switch {
	case err == nil && owned(mf, tenant):
		return mf, nil
	case err != nil && !errors.Is(err, snapshot.ErrNotFound):
		return nil, fmt.Errorf("find snapshot %s: %w", ref, err)
	}
	list, err := m.tenantSnapshots(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("find snapshot %s: %w", ref, err)
	}
	for _, mf := range list {
		if mf.Meta.Extra[extraName] == ref {
			return mf, nil
		}
	}
	return nil, ErrSnapshotNotFound.With(field, "no snapshot has the id or name %q (list them: GET /v1/snapshots)", ref)
}

// SnapshotFilter picks snapshots of a listing; an empty field picks all.
type SnapshotFilter struct {
	// SandboxID: those of this sandbox; Name: those given this name or
	// with this id.
	SandboxID, Name string
}

// Snapshots lists tenant's snapshots that f picks, newest first.
func (m *Manager) Snapshots(ctx context.Context, tenant string, f SnapshotFilter) ([]sandbox.Snapshot, error) {
	list, err := m.tenantSnapshots(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Snapshot, 0, len(list))
	for _, mf := range list {
		if (f.SandboxID == "" || mf.Meta.Extra[MetaSandbox] == f.SandboxID) &&
			(f.Name == "" || mf.Meta.Extra[extraName] == f.Name || mf.ID == f.Name) {
			out = append(out, snapshotInfo(mf))
		}
	}
	return out, nil
}

// MaxSnapshotPage bounds a page of SnapshotPage.
const MaxSnapshotPage = 1000

// SnapshotPage is a page of Snapshots: at most limit (1 to
// MaxSnapshotPage) after cursor ("": from the newest), and the cursor of
// the next page ("": none). A cursor is opaque to the caller; one this
// server did not make is refused naming field.
func (m *Manager) SnapshotPage(ctx context.Context, tenant string, f SnapshotFilter, field, cursor string, limit int) ([]sandbox.Snapshot, string, error) {
	if f.SandboxID != "" && !validate.ValidID(f.SandboxID) {
		return nil, "", validate.Refuse("sandbox_id", validate.IDRule)
	}
	var after sandbox.Snapshot
	if cursor != "" {
		ns, id, ok := strings.Cut(cursor, ".")
		n, err := strconv.ParseInt(ns, 10, 64)
		if !ok || err != nil || snapshot.ValidID(id) != nil {
			return nil, "", validate.Refuse(field, "is not a cursor this server gave; start again without it")
		}
		after = sandbox.Snapshot{SnapshotID: id, CreatedAt: time.Unix(0, n).UTC()}
	}
	all, err := m.Snapshots(ctx, tenant, f)
	if err != nil {
		return nil, "", err
	}
	if cursor != "" {
		// Newest first: what comes after the cursor is older, or as old
		// with a smaller id.
		all = slices.DeleteFunc(all, func(sn sandbox.Snapshot) bool {
			c := sn.CreatedAt.Compare(after.CreatedAt)
			return c > 0 || c == 0 && sn.SnapshotID >= after.SnapshotID
		})
	}
	if len(all) <= limit {
		return all, "", nil
	}
	last := all[limit-1]
	return all[:limit], strconv.FormatInt(last.CreatedAt.UnixNano(), 10) + "." + last.SnapshotID, nil
}

// Snapshot describes tenant's snapshot ref (its id or name).
func (m *Manager) Snapshot(ctx context.Context, tenant, ref string) (sandbox.Snapshot, error) {
	mf, err := m.findSnapshot(ctx, tenant, "snapshot_id", ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	return snapshotInfo(mf), nil
}

// deleteSnapshot deletes tenant's snapshot ref (its id or name). Its
// chunks stay until the store's GC finds no snapshot names them; the
// sandboxes made from it are not touched.
func (m *Manager) deleteSnapshot(ctx context.Context, tenant, ref string) error {
	mf, err := m.findSnapshot(ctx, tenant, "snapshot_id", ref)
	if err != nil {
		return err
	}
	if err := m.cfg.Snapshots.Delete(ctx, mf.ID); errors.Is(err, snapshot.ErrNotFound) {
		return ErrSnapshotNotFound.With("snapshot_id", "the snapshot %s was deleted meanwhile", mf.ID)
	} else if err != nil {
		return err
	}
	m.log.Info("snapshot deleted", "snapshot", mf.ID, "tenant", tenant)
	return nil
}

// snapshotNamed takes a snapshot of the sandbox named name ("": none)
// and describes it. The sandbox runs on (see the comment atop this file);
// a paused one is taken as its pause left it.
func (s *Sandbox) snapshotNamed(ctx context.Context, name string) (sandbox.Snapshot, error) {
	if err := checkSnapshotName(name); err != nil {
		return sandbox.Snapshot{}, err
	}
	start := time.Now()
	mf, stopped, err := s.createSnapshot(ctx, name, kindSnapshot)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	info := snapshotInfo(mf)
	info.DurationMS, info.PausedMS = time.Since(start).Milliseconds(), stopped.Milliseconds()
	return info, nil
}

// createSnapshot takes a snapshot of the sandbox of kind; it returns how
// long the sandbox was stopped for it (or its file system frozen).
func (s *Sandbox) createSnapshot(ctx context.Context, name, kind string) (*snapshot.Manifest, time.Duration, error) {
	m := s.m
	if _, err := m.snapStore(); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	if !s.paused() {
		// Made again first if it died.
		if _, err := s.held(ctx); err != nil {
			return nil, 0, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, 0, err
	}
	defer s.w.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	m.mu.Lock()
	extra := map[string]string{extraKind: kind, extraLanguage: s.spec.Request.Language}
	m.mu.Unlock()
	if name != "" {
		extra[extraName] = name
	}
	mf, memory, stopped, err := s.snapshotRunningLocked(ctx, newSnapshotID(), extra)
	if err != nil {
		return nil, stopped, fmt.Errorf("snapshot %s: %w", s.w.Key(), err)
	}
	m.log.Info("snapshot taken", "sandbox", s.w.Key(), "snapshot", mf.ID, "kind", kind, "memory", memory,
		"size_bytes", mf.Stats.LogicalBytes, "new_bytes", mf.Stats.NewBytes, "stopped_ms", stopped.Milliseconds(),
		"duration_ms", time.Since(start).Milliseconds())
	return mf, stopped, nil
}

// snapshotRunningLocked writes the sandbox to the store as snapshot id
// with extra in its Meta (the workspace's lock and s.mu are held): as its
// pause left it when it is paused, else as the comment atop this file
// says. It returns whether the snapshot has the memory and how long the
// sandbox was stopped (or its file system frozen).
func (s *Sandbox) snapshotRunningLocked(ctx context.Context, id string, extra map[string]string) (*snapshot.Manifest, bool, time.Duration, error) {
	m := s.m
	m.mu.Lock()
	p := s.spec.Paused
	memory := p != nil && p.Memory
	m.mu.Unlock()
	if p != nil {
		extra[extraMemory] = strconv.FormatBool(memory)
		mf, err := s.snapshotOf(ctx, id, snapshotOptions{extra: extra})
		return mf, memory, 0, err
	}
	if s.sb == nil || !alive(s.sb) {
		return nil, false, 0, fmt.Errorf("the sandbox ended meanwhile: %w", ErrLost)
	}
	t0 := time.Now()
	if _, ok := s.sb.(runtime.Pauser); ok {
		_, err := s.pauseMemoryLocked(ctx)
		switch {
		case err == nil:
			// Back once its state is staged (the saved memory linked, the
			// disk copied), whatever the caller does now: the upload reads
			// the staged copy while it runs on.
			var rerr error
			var stopped time.Duration
			revived := false
			revive := func() {
				revived = true
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotRestoreWait)
				defer cancel()
				rep := &sandbox.SandboxResume{}
				rerr = s.reviveLocked(rctx, &sandbox.SandboxPause{Memory: true}, rep)
				stopped = time.Since(t0)
				if rerr == nil && (!rep.Memory || rep.ProcessesLost > 0) {
					m.log.Warn("a sandbox did not come back whole from its snapshot", "sandbox", s.w.Key(),
						"memory", rep.Memory, "processes_lost", rep.ProcessesLost)
				}
			}
			img := filepath.Join(s.w.Dir(), ".snapshot-disk.img")
			os.Remove(img)
			defer os.Remove(img)
			var mf *snapshot.Manifest
			werr := disk.CopyImage(s.w.Disk(), img)
			if werr == nil {
				extra[extraMemory] = "true"
				mf, werr = s.snapshotOf(ctx, id, snapshotOptions{extra: extra, disk: img, staged: revive,
					paused: &sandbox.SandboxPause{PausedAt: m.table.Now().UTC(), Memory: true, Reason: sandbox.PauseClient}})
			}
			if !revived {
				revive()
			}
			if err := errors.Join(werr, rerr); err != nil {
				return nil, true, stopped, err
			}
			return mf, true, stopped, nil
		case !errors.Is(err, runtime.ErrNotPausable):
			return nil, false, time.Since(t0), err
		}
		m.log.Warn("a sandbox cannot be saved with its memory; taking a snapshot of its files only", "sandbox", s.w.Key(), "err", err)
	}
	c, ok := s.sb.(runtime.DiskCopier)
	if !ok {
		return nil, false, 0, ErrUnsupported.With("", "this sandbox's runtime cannot copy its disk while it runs")
	}
	img := filepath.Join(s.w.Dir(), ".snapshot-disk.img")
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, false, 0, err
	}
	defer os.Remove(img)
	t0 = time.Now()
	if err := c.CopyDisk(ctx, img); err != nil {
		return nil, false, time.Since(t0), err
	}
	stopped := time.Since(t0)
	extra[extraMemory] = "false"
	mf, err := s.snapshotOf(ctx, id, snapshotOptions{extra: extra, disk: img,
		paused: &sandbox.SandboxPause{PausedAt: m.table.Now().UTC(), Reason: sandbox.PauseClient}})
	return mf, false, stopped, err
}

// fromSnapshot makes tenant's sandbox req.SandboxID (given) from
// tenant's snapshot req.SnapshotID, timeout long (checked): materialized
// paused, given the request mergeRequest makes, and resumed.
func (m *Manager) fromSnapshot(ctx context.Context, tenant string, req sandbox.CreateSandboxRequest, timeout time.Duration) (*Sandbox, sandbox.Info, error) {
	mf, err := m.findSnapshot(ctx, tenant, "snapshot_id", req.SnapshotID)
	if err != nil {
		return nil, sandbox.Info{}, err
	}
	id := req.SandboxID
	if err := m.table.RemoveExpired(ctx, tenant, id); err != nil {
		return nil, sandbox.Info{}, err
	}
	s, err := m.Materialize(ctx, tenant, id, mf.ID)
	if err != nil {
		return nil, sandbox.Info{}, err
	}
	fail := func(err error) (*Sandbox, sandbox.Info, error) {
		// Nothing of it may stay: not its files, nor its ownership.
		if rerr := m.table.Remove(s.w); rerr != nil {
			m.log.Warn("remove a sandbox that could not be made from a snapshot", "sandbox", s.w.Key(), "err", rerr)
		}
		return nil, sandbox.Info{}, err
	}
	m.mu.Lock()
	base, image := s.spec.Request, s.spec.Image
	m.mu.Unlock()
	r, err := mergeRequest(base, req, image)
	if err != nil {
		return fail(err)
	}
	r.SnapshotID = mf.ID
	if _, err := m.prepare(tenant, &r); err != nil {
		return fail(err)
	}
	m.mu.Lock()
	s.spec.Request = r
	s.spec.KeepAfterTimeout = 0
	if pausesAtTimeout(r.Lifecycle) {
		s.spec.KeepAfterTimeout = m.pausedTTL()
	}
	s.spec.Paused.Reason = sandbox.PauseClient
	s.saveLocked()
	m.mu.Unlock()
	if _, err := m.table.Update(s.w, func(i *workspace.Info) { i.TTLSeconds = int64(timeout.Seconds()) }); err != nil {
		return fail(err)
	}
	info, err := s.Resume(ctx)
	if err != nil {
		return fail(err)
	}
	m.log.Info("sandbox created", "sandbox", s.w.Key(), "tier", info.Tier, "image", info.Image, "snapshot", mf.ID)
	return s, info, nil
}

// mergeRequest is the request of a sandbox made from a snapshot whose
// sandbox was made with base on image: base, which req may not contradict
// (language, image, tier, limits, network), with req's id, timeout,
// metadata, lifecycle and public ports where set and its env added.
func mergeRequest(base, req sandbox.CreateSandboxRequest, image string) (sandbox.CreateSandboxRequest, error) {
	same := func(field string, given, has any, zero bool) error {
		if zero || fmt.Sprint(given) == fmt.Sprint(has) {
			return nil
		}
		return validate.Refuse(field, "must be empty or the snapshot's (%v): a sandbox made from a snapshot is made as its sandbox was", has)
	}
	l, bl := req.Limits, base.Limits
	for _, c := range []error{
		same("language", req.Language, base.Language, req.Language == ""),
		same("image", req.Image, image, req.Image == ""),
		same("tier", req.Tier, base.Tier, req.Tier == "" || req.Tier == sandbox.Tier("auto")),
		same("limits.memory_mb", l.MemoryMB, bl.MemoryMB, l.MemoryMB == 0),
		same("limits.cpu_cores", l.CPUCores, bl.CPUCores, l.CPUCores == 0),
		same("limits.cpus", l.CPUs, bl.CPUCores, l.CPUs == 0),
		same("limits.pids", l.Pids, bl.Pids, l.Pids == 0),
		same("limits.disk_mb", l.DiskMB, bl.DiskMB, l.DiskMB == 0),
	} {
		if c != nil {
			return base, c
		}
	}
	if req.Network != nil && fmt.Sprint(req.Network.Allow) != fmt.Sprint(networkAllow(base.Network)) {
		return base, validate.Refuse("network", "must be empty or the snapshot's: a sandbox made from a snapshot is made as its sandbox was")
	}
	base.SandboxID, base.TimeoutSeconds = req.SandboxID, req.TimeoutSeconds
	if req.Metadata != nil {
		base.Metadata = req.Metadata
	}
	if req.Lifecycle != nil {
		base.Lifecycle = req.Lifecycle
	}
	base.PublicPorts = base.PublicPorts || req.PublicPorts
	if len(req.Env) > 0 {
		env := maps.Clone(base.Env)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, req.Env)
		base.Env = env
	}
	return base, nil
}

func networkAllow(n *sandbox.Network) []string {
	if n == nil {
		return nil
	}
	return n.Allow
}

// ForkResult is one fork's sandbox, or why it could not be made.
type ForkResult struct {
	Info sandbox.Info
	Err  error
}

// fork makes count sandboxes (1 to MaxForks) from one snapshot of the
// sandbox, each living timeout (0: the default), with the sandbox's
// metadata; then each goes its own way. The snapshot is not kept. Each
// fork is made or fails on its own; the error is the snapshot's.
func (s *Sandbox) fork(ctx context.Context, count int, timeout time.Duration) ([]ForkResult, error) {
	m := s.m
	if count == 0 {
		count = 1
	}
	if count < 1 || count > MaxForks {
		return nil, validate.Refuse("count", "must be between 1 and %d", MaxForks)
	}
	if timeout < 0 || timeout > m.cfg.MaxTimeout {
		return nil, validate.Refuse("timeout_seconds", "must be between 0 (the default) and %d", int(m.cfg.MaxTimeout.Seconds()))
	}
	mf, _, err := s.createSnapshot(ctx, "", kindFork)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := m.cfg.Snapshots.Delete(context.WithoutCancel(ctx), mf.ID); err != nil {
			m.log.Warn("delete a fork's snapshot", "sandbox", s.w.Key(), "snapshot", mf.ID, "err", err)
		}
	}()
	out := make([]ForkResult, count)
	// A few at once: each restores the snapshot's chunks and its memory.
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, info, err := m.Create(ctx, s.tenant, sandbox.CreateSandboxRequest{SnapshotID: mf.ID,
				TimeoutSeconds: int64(timeout / time.Second)})
			out[i] = ForkResult{Info: info, Err: err}
		}()
	}
	wg.Wait()
	return out, nil
}
