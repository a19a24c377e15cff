package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
	"github.com/corralhq/corral/sandbox"
)

// Snapshots a client takes of its sandboxes, kept in the snapshot store
// (internal/snapshot) every node shares, and the sandboxes made from them.
//
// A snapshot holds the sandbox's disk image (its files and the writable
// layer of its root) as "disk.img" and, when it kept the memory (gVisor),
// what a pause saves under "paused/": the checkpoint and the description
// of its processes and contexts (hoststate.go). It is taken without ending
// the sandbox:
//
//   - gVisor: the sandbox is paused with its memory (runsc checkpoint), the
//     saved state is linked and the disk copied into a staging directory,
//     and the sandbox is restored at once: it is stopped for the checkpoint,
//     the copy and the restore (Snapshot.PausedMS), not for the upload,
//     which reads the staging copy while it runs on. runsc's
//     --leave-running would keep it running during the checkpoint, but its
//     disk would move on meanwhile, away from the memory saved.
//   - runc (or a gVisor sandbox that cannot be saved): its file system is
//     frozen (FIFREEZE) while its disk image is copied; its processes run
//     on, their writes waiting for the copy.
//   - a paused sandbox: what its pause left, as it is.
//
// The manifest's Meta names the tenant, the sandbox, the client's name and
// the creation request (Extra), so that a sandbox made from the snapshot
// is made as its sandbox was: same image, tier, limits and network (a
// memory restore needs them). Snapshots are the tenant's: another tenant's
// is not found. A name names the newest of the tenant's snapshots given
// it; the older ones stay, by their ids.
//
// A fork is a snapshot that is not listed, from which Count sandboxes are
// made, then deleted (its chunks stay until the store's GC, and while the
// forks' disks share nothing with it).

// Keys of a snapshot's Meta.Extra.
const (
	extraKind     = "kind"
	extraTenant   = "tenant"
	extraSandbox  = "sandbox_id"
	extraName     = "name"
	extraLanguage = "language"
	extraRequest  = "request"
	extraMemory   = "memory"
	extraPaused   = "paused_ms"
	extraDuration = "duration_ms"
	extraSize     = "size_bytes"
	// kindSnapshot marks a client's snapshot; kindFork one taken for a
	// fork (not listed). Other writers of the store (pauses, drains) use
	// other kinds.
	kindSnapshot = "snapshot"
	kindFork     = "fork"
)

// Names inside a snapshot.
const (
	snapDisk   = "disk.img"
	snapPaused = "paused"
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
	// ErrNoSnapshots: the server keeps no snapshots.
	ErrNoSnapshots = &fault.Error{Kind: fault.Unimplemented, Code: "not_implemented",
		Message: "this server keeps no snapshots (it has no snapshot store)"}
)

func (m *Manager) snapStore() (*snapshot.Store, error) {
	if m.snaps == nil {
		return nil, ErrNoSnapshots
	}
	return m.snaps, nil
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
	num := func(k string) int64 { n, _ := strconv.ParseInt(x[k], 10, 64); return n }
	return sandbox.Snapshot{SnapshotID: mf.ID, Name: x[extraName], SandboxID: x[extraSandbox], Language: x[extraLanguage],
		Image: mf.Meta.Image, Tier: mf.Meta.Tier, Memory: x[extraMemory] == "true",
		SizeBytes: num(extraSize), StoredBytes: mf.Stats.NewBytes,
		DurationMS: num(extraDuration), PausedMS: num(extraPaused), CreatedAt: mf.Created}
}

// owned reports whether mf is one of tenant's snapshots (a fork's too).
func owned(mf *snapshot.Manifest, tenant string) bool {
	k := mf.Meta.Extra[extraKind]
	return (k == kindSnapshot || k == kindFork) && mf.Meta.Extra[extraTenant] == tenant
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

// Snapshots lists tenant's snapshots, newest first; those of sandboxID
// alone when it is set.
func (m *Manager) Snapshots(ctx context.Context, tenant, sandboxID string) ([]sandbox.Snapshot, error) {
	list, err := m.tenantSnapshots(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Snapshot, 0, len(list))
	for _, mf := range list {
		if sandboxID == "" || mf.Meta.Extra[extraSandbox] == sandboxID {
			out = append(out, snapshotInfo(mf))
		}
	}
	return out, nil
}

// Snapshot describes tenant's snapshot ref (its id or name).
func (m *Manager) Snapshot(ctx context.Context, tenant, ref string) (sandbox.Snapshot, error) {
	mf, err := m.findSnapshot(ctx, tenant, "snapshot_id", ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	return snapshotInfo(mf), nil
}

// DeleteSnapshot deletes tenant's snapshot ref (its id or name). Its
// chunks stay until the store's GC finds no snapshot names them; the
// sandboxes made from it are not touched.
func (m *Manager) DeleteSnapshot(ctx context.Context, tenant, ref string) error {
	mf, err := m.findSnapshot(ctx, tenant, "snapshot_id", ref)
	if err != nil {
		return err
	}
	if err := m.snaps.Delete(ctx, mf.ID); errors.Is(err, snapshot.ErrNotFound) {
		return ErrSnapshotNotFound.With("snapshot_id", "the snapshot %s was deleted meanwhile", mf.ID)
	} else if err != nil {
		return err
	}
	m.log.Info("snapshot deleted", "snapshot", mf.ID, "tenant", tenant)
	return nil
}

// Snapshot takes a snapshot of the sandbox named name ("": none) and
// describes it. The sandbox runs on (see the comment atop this file); a
// paused one is taken as its pause left it.
func (s *Sandbox) Snapshot(ctx context.Context, name string) (sandbox.Snapshot, error) {
	if err := checkSnapshotName(name); err != nil {
		return sandbox.Snapshot{}, err
	}
	mf, err := s.snapshot(ctx, name, kindSnapshot)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	return snapshotInfo(mf), nil
}

// snapshot takes a snapshot of the sandbox of kind.
func (s *Sandbox) snapshot(ctx context.Context, name, kind string) (*snapshot.Manifest, error) {
	m := s.m
	st, err := m.snapStore()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if !s.paused() {
		// Made again first if it died.
		if _, err := s.held(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(s.w.Dir(), ".snapshot-")
	if err != nil {
		s.w.Unlock()
		return nil, fmt.Errorf("snapshot %s: %w", s.w.Key(), err)
	}
	defer os.RemoveAll(stage)
	meta, pausedFor, err := s.stage(ctx, stage)
	s.w.Unlock()
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", s.w.Key(), err)
	}
	m.mu.Lock()
	req, _ := json.Marshal(s.spec.Request)
	meta.Image, meta.Tier, meta.Limits = s.spec.Image, s.spec.Tier, s.spec.Request.Limits
	lang := s.spec.Request.Language
	m.mu.Unlock()
	meta.Extra[extraKind], meta.Extra[extraTenant], meta.Extra[extraSandbox] = kind, s.tenant, s.id
	meta.Extra[extraLanguage], meta.Extra[extraRequest] = lang, string(req)
	meta.Extra[extraPaused] = strconv.FormatInt(pausedFor.Milliseconds(), 10)
	meta.Extra[extraSize] = strconv.FormatInt(dirBytes(stage), 10)
	if name != "" {
		meta.Extra[extraName] = name
	}
	// The upload's time is in the snapshot's duration: the manifest is
	// written with it, so it is measured up to the upload's start and
	// the upload's own cost is in Stats.
	meta.Extra[extraDuration] = strconv.FormatInt(time.Since(start).Milliseconds(), 10)
	mf, err := st.Write(ctx, newSnapshotID(), meta, stage)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", s.w.Key(), err)
	}
	m.log.Info("snapshot taken", "sandbox", s.w.Key(), "snapshot", mf.ID, "kind", kind, "memory", meta.Extra[extraMemory],
		"size_bytes", meta.Extra[extraSize], "new_bytes", mf.Stats.NewBytes, "paused_ms", pausedFor.Milliseconds(),
		"duration_ms", time.Since(start).Milliseconds())
	return mf, nil
}

// stage puts what a snapshot of the sandbox holds in dir (the workspace's
// lock is held): its disk image and, with its memory, its saved state. It
// returns the snapshot's Meta (Extra made, the memory said) and how long
// the sandbox was stopped or its file system frozen.
func (s *Sandbox) stage(ctx context.Context, dir string) (snapshot.Meta, time.Duration, error) {
	m := s.m
	meta := snapshot.Meta{Extra: map[string]string{}}
	img := filepath.Join(dir, snapDisk)
	s.mu.Lock()
	defer s.mu.Unlock()
	m.mu.Lock()
	p := s.spec.Paused
	memory := p != nil && p.Memory
	m.mu.Unlock()
	if p != nil {
		// At rest: its disk is detached, its memory saved.
		if err := disk.CopyImage(s.w.Disk(), img); err != nil {
			return meta, 0, err
		}
		if memory {
			if err := linkTree(s.pauseDir(), filepath.Join(dir, snapPaused)); err != nil {
				return meta, 0, err
			}
			s.describeSaved(&meta, filepath.Join(dir, snapPaused))
		}
		meta.Extra[extraMemory] = strconv.FormatBool(memory)
		return meta, 0, nil
	}
	if s.sb == nil || !alive(s.sb) {
		return meta, 0, fmt.Errorf("the sandbox ended meanwhile: %w", ErrLost)
	}
	if _, ok := s.sb.(runtime.Pauser); ok {
		t0 := time.Now()
		_, err := s.pauseMemoryLocked(ctx)
		switch {
		case err == nil:
			t1 := time.Now()
			serr := linkTree(s.pauseDir(), filepath.Join(dir, snapPaused))
			if serr == nil {
				serr = disk.CopyImage(s.w.Disk(), img)
			}
			t2 := time.Now()
			// Back at once, whatever the caller does now.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotRestoreWait)
			rep := &sandbox.SandboxResume{}
			rerr := s.reviveLocked(rctx, &sandbox.SandboxPause{Memory: true}, rep)
			cancel()
			paused := time.Since(t0)
			m.log.Info("sandbox stopped for a snapshot", "sandbox", s.w.Key(), "pause_ms", t1.Sub(t0).Milliseconds(),
				"copy_ms", t2.Sub(t1).Milliseconds(), "restore_ms", time.Since(t2).Milliseconds())
			if rerr != nil {
				return meta, paused, errors.Join(serr, rerr)
			}
			if !rep.Memory || rep.ProcessesLost > 0 {
				m.log.Warn("a sandbox did not come back whole from its snapshot", "sandbox", s.w.Key(),
					"memory", rep.Memory, "processes_lost", rep.ProcessesLost)
			}
			if serr != nil {
				return meta, paused, serr
			}
			s.describeSaved(&meta, filepath.Join(dir, snapPaused))
			meta.Extra[extraMemory] = "true"
			return meta, paused, nil
		case !errors.Is(err, runtime.ErrNotPausable):
			return meta, time.Since(t0), err
		}
		m.log.Warn("a sandbox cannot be saved with its memory; taking a snapshot of its files only", "sandbox", s.w.Key(), "err", err)
	}
	c, ok := s.sb.(runtime.DiskCopier)
	if !ok {
		return meta, 0, ErrUnsupported.With("", "this sandbox's runtime cannot copy its disk while it runs")
	}
	t0 := time.Now()
	if err := c.CopyDisk(ctx, img); err != nil {
		return meta, time.Since(t0), err
	}
	meta.Extra[extraMemory] = "false"
	return meta, time.Since(t0), nil
}

// describeSaved puts in meta the processes and contexts the saved state in
// dir holds (hoststate.go), for the snapshot's description.
func (s *Sandbox) describeSaved(meta *snapshot.Meta, dir string) {
	st, err := readHostState(dir)
	if err != nil {
		return
	}
	for _, p := range st.Processes {
		if p.Exit == nil {
			meta.Processes = append(meta.Processes, p.Info)
		}
	}
	for _, c := range st.Contexts.Contexts {
		meta.Contexts = append(meta.Contexts, sandbox.CodeContext{ID: c.ID, Language: c.Language, Cwd: c.Cwd})
	}
}

// linkTree makes dst a tree of hard links to the regular files under src:
// a restore removes src, the links stay.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o700)
		case d.Type().IsRegular():
			return os.Link(p, to)
		}
		return fmt.Errorf("saved state %s: %s is not a regular file", src, rel)
	})
}

// fromSnapshot returns the request of a sandbox made from tenant's
// snapshot req.SnapshotID: the request its sandbox was made with, which
// req may not contradict (language, image, tier, limits, network), with
// req's id, timeout, metadata, lifecycle and public ports where set and
// its env added.
func (m *Manager) fromSnapshot(ctx context.Context, tenant string, req sandbox.CreateSandboxRequest) (*snapshot.Manifest, sandbox.CreateSandboxRequest, error) {
	mf, err := m.findSnapshot(ctx, tenant, "snapshot_id", req.SnapshotID)
	if err != nil {
		return nil, req, err
	}
	var base sandbox.CreateSandboxRequest
	if err := json.Unmarshal([]byte(mf.Meta.Extra[extraRequest]), &base); err != nil {
		return nil, req, fmt.Errorf("snapshot %s: its sandbox's request: %w", mf.ID, err)
	}
	same := func(field string, given, has any, zero bool) error {
		if zero || fmt.Sprint(given) == fmt.Sprint(has) {
			return nil
		}
		return validate.Refuse(field, "must be empty or the snapshot's (%v): a sandbox made from a snapshot is made as its sandbox was", has)
	}
	l, bl := req.Limits, base.Limits
	for _, c := range []error{
		same("language", req.Language, base.Language, req.Language == ""),
		same("image", req.Image, mf.Meta.Image, req.Image == ""),
		same("tier", req.Tier, base.Tier, req.Tier == "" || req.Tier == sandbox.Tier("auto")),
		same("limits.memory_mb", l.MemoryMB, bl.MemoryMB, l.MemoryMB == 0),
		same("limits.cpu_cores", l.CPUCores, bl.CPUCores, l.CPUCores == 0),
		same("limits.cpus", l.CPUs, bl.CPUCores, l.CPUs == 0),
		same("limits.pids", l.Pids, bl.Pids, l.Pids == 0),
		same("limits.disk_mb", l.DiskMB, bl.DiskMB, l.DiskMB == 0),
	} {
		if c != nil {
			return nil, req, c
		}
	}
	if req.Network != nil && fmt.Sprint(req.Network.Allow) != fmt.Sprint(networkAllow(base.Network)) {
		return nil, req, validate.Refuse("network", "must be empty or the snapshot's: a sandbox made from a snapshot is made as its sandbox was")
	}
	base.SandboxID, base.SnapshotID, base.TimeoutSeconds = req.SandboxID, mf.ID, req.TimeoutSeconds
	if req.Metadata != nil {
		base.Metadata = req.Metadata
	}
	if req.Lifecycle != nil {
		base.Lifecycle = req.Lifecycle
	}
	base.PublicPorts = base.PublicPorts || req.PublicPorts
	if len(req.Env) > 0 {
		if base.Env == nil {
			base.Env = map[string]string{}
		}
		for k, v := range req.Env {
			base.Env[k] = v
		}
	}
	return mf, base, nil
}

func networkAllow(n *sandbox.Network) []string {
	if n == nil {
		return nil
	}
	return n.Allow
}

// makeFrom makes the new sandbox's running sandbox from snapshot mf, its
// workspace new and empty but for its record: the snapshot's disk, then
// its memory restored when it has it (as a resume does: rep says what was
// kept), else a sandbox on that disk.
func (s *Sandbox) makeFrom(ctx context.Context, mf *snapshot.Manifest) (*sandbox.SandboxResume, error) {
	m := s.m
	// Restore makes it, whole or not at all.
	stage := filepath.Join(s.w.Dir(), ".restore")
	if err := os.RemoveAll(stage); err != nil {
		return nil, fmt.Errorf("make %s from snapshot %s: %w", s.w.Key(), mf.ID, err)
	}
	defer os.RemoveAll(stage)
	if _, err := m.snaps.Restore(ctx, mf.ID, stage); err != nil {
		return nil, fmt.Errorf("make %s from snapshot %s: %w", s.w.Key(), mf.ID, err)
	}
	if err := os.Rename(filepath.Join(stage, snapDisk), s.w.Disk()); err != nil {
		return nil, fmt.Errorf("make %s from snapshot %s: its disk: %w", s.w.Key(), mf.ID, err)
	}
	saved := filepath.Join(stage, snapPaused)
	if _, err := os.Stat(saved); mf.Meta.Extra[extraMemory] != "true" || err != nil {
		_, err := s.held(ctx)
		return nil, err
	}
	m.mu.Lock()
	tier := runtime.Tier(s.spec.Tier)
	m.mu.Unlock()
	if err := os.Rename(saved, s.pauseDir()); err != nil {
		return nil, fmt.Errorf("make %s from snapshot %s: its memory: %w", s.w.Key(), mf.ID, err)
	}
	if err := m.fleet.Rebase(tier, s.pauseDir(), s.w.Disk()); err != nil {
		return nil, fmt.Errorf("make %s from snapshot %s: %w", s.w.Key(), mf.ID, err)
	}
	// Paused with its memory, as the snapshot's sandbox was for it; the
	// resume restores it, or makes it anew on its disk.
	m.mu.Lock()
	s.spec.Paused = &sandbox.SandboxPause{PausedAt: mf.Created, Memory: true, Reason: sandbox.PauseClient}
	m.mu.Unlock()
	info, err := s.Resume(ctx)
	if err != nil {
		return nil, err
	}
	return info.Resume, nil
}

// ForkResult is one fork's sandbox, or why it could not be made.
type ForkResult struct {
	Info sandbox.Info
	Err  error
}

// Fork makes count sandboxes (1 to MaxForks) from one snapshot of the
// sandbox, each living timeout (0: the default), with the sandbox's
// metadata; then each goes its own way. The snapshot is not kept. Each
// fork is made or fails on its own; the error is the snapshot's.
func (s *Sandbox) Fork(ctx context.Context, count int, timeout time.Duration) ([]ForkResult, error) {
	m := s.m
	if count == 0 {
		count = 1
	}
	if count < 1 || count > MaxForks {
		return nil, validate.Refuse("count", "must be between 1 and %d", MaxForks)
	}
	if timeout < 0 || timeout > m.cfg.MaxTimeout {
		return nil, m.timeoutError()
	}
	mf, err := s.snapshot(ctx, "", kindFork)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := m.snaps.Delete(context.WithoutCancel(ctx), mf.ID); err != nil {
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
