package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// A paused sandbox kept in the snapshot store (internal/snapshot), so that
// any node can take it up. Two primitives, on which pause, drain and the
// snapshot API build:
//
//	func (s *Sandbox) Snapshot(ctx context.Context, id string) (*snapshot.Manifest, error)
//	func (m *Manager) Materialize(ctx context.Context, tenant, id, snap string) (*Sandbox, error)
//
// Snapshot writes a paused sandbox's directory to the store as snapshot id
// ("" for a new id): its disk image (the writable layer with /workspace),
// its saved memory when it was paused with it (the pause directory:
// runsc's checkpoint and corral-host.json, its process list and
// contexts), its access token, and its record (snapshotRecord: the
// workspace's description and the sandbox's Spec). The manifest's Meta
// names its image, tier, limits, contexts and processes, and in Extra the
// tenant and sandbox it was taken of (MetaTenant, MetaSandbox), and
// MetaPause on the snapshot a pause writes (one that is the paused
// sandbox, removed with its resume or removal; not a client's). The sandbox
// stays paused, its local files untouched (a resume on this node reads
// them, not the store). ErrNotPaused unless it is paused; ErrNoSnapshots
// when the Manager has no store (Config.Snapshots).
//
// Materialize makes tenant's sandbox id on this node from snapshot snap,
// paused as the snapshot was: Resume (or its next call, when it wakes on
// one) resumes it through the ordinary path, from its memory when the
// snapshot holds it (with its processes and contexts, from
// corral-host.json) and else on its disk. id is either the snapshot's own
// sandbox (a move: its record, access token and expiry kept) or a new id
// (a copy: made now, its paused TTL from now, no access token, no
// executions). It claims id in the cluster first (ErrExists when another
// node owns it, or this node has it). A failure leaves nothing of it but
// the claim, which the caller gives up if it made one for nothing.

// ErrNoSnapshots: the server keeps no snapshots (no snapshot store).
var ErrNoSnapshots = &fault.Error{Kind: fault.Unimplemented, Code: "not_implemented",
	Message: "this server keeps no snapshots of sandboxes"}

// Keys of a snapshot's Meta.Extra.
const (
	// MetaTenant is the tenant of the sandbox the snapshot was taken of.
	MetaTenant = "tenant"
	// MetaSandbox is that sandbox's id.
	MetaSandbox = "sandbox_id"
	// MetaPause is "true" on a snapshot a pause wrote: the paused
	// sandbox itself, removed with its resume or removal.
	MetaPause = "pause"
)

// snapshotRecordFile is the sandbox's record in a snapshot: not
// session.json, so that a directory being materialized is no workspace
// to a node that starts meanwhile (workspace.Open skips it).
const snapshotRecordFile = "corral-sandbox.json"

// snapshotRecord is what a snapshot holds of the sandbox beside its
// files.
type snapshotRecord struct {
	Tenant string         `json:"tenant"`
	Info   workspace.Info `json:"info"`
	Spec   Spec           `json:"spec"`
	// Pause: a pause wrote it (MetaPause).
	Pause bool `json:"pause,omitempty"`
	// ProcessesLost counts the processes that ended with a pause of its
	// files only, for the resume's answer.
	ProcessesLost int `json:"processes_lost,omitempty"`
}

// Snapshot writes the paused sandbox to the snapshot store (see above).
func (s *Sandbox) Snapshot(ctx context.Context, id string) (*snapshot.Manifest, error) {
	if s.m.cfg.Snapshots == nil {
		return nil, ErrNoSnapshots
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.w.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked(ctx, id, "", false)
}

// snapshotLocked is Snapshot with the workspace's lock and s.mu held; parent is
// the snapshot this one follows ("" none), pause whether a pause writes
// it (MetaPause).
func (s *Sandbox) snapshotLocked(ctx context.Context, id, parent string, pause bool) (*snapshot.Manifest, error) {
	return s.snapshotOf(ctx, id, snapshotOptions{parent: parent, pause: pause})
}

// snapshotOptions are what a snapshot of the sandbox (snapshotOf) is
// besides the paused sandbox itself.
type snapshotOptions struct {
	// parent is the snapshot this one follows ("" none); pause whether a
	// pause writes it (MetaPause).
	parent string
	pause  bool
	// extra is added to Meta.Extra (a client's snapshot: snapshots.go).
	extra map[string]string
	// paused, when set, is the pause the snapshot records of a sandbox
	// that is not paused (a snapshot of a running one: its memory saved
	// and its disk at rest for the moment, or disk a copy of its disk).
	paused *sandbox.SandboxPause
	// disk is a copy of the sandbox's disk image to take (moved into
	// the snapshot's directory, on the same file system) instead of its
	// own ("": its own, at rest).
	disk string
	// staged, when set, is called once the snapshot's directory holds
	// what it takes, before the upload: from then on the sandbox may
	// change (a running one's snapshot restores it then).
	staged func()
}

// snapshotOf writes the sandbox, paused or as o says, to the snapshot
// store as snapshot id (the workspace's lock and s.mu are held).
func (s *Sandbox) snapshotOf(ctx context.Context, id string, o snapshotOptions) (*snapshot.Manifest, error) {
	m := s.m
	parent, pause := o.parent, o.pause
	m.mu.Lock()
	paused := s.spec.Paused
	if o.paused != nil {
		paused = o.paused
	}
	if paused == nil {
		m.mu.Unlock()
		return nil, ErrNotPaused
	}
	st := m.table.State(s.w)
	rec := snapshotRecord{Tenant: s.tenant, Info: st.Info, Spec: *s.spec, Pause: pause, ProcessesLost: s.pauseLost}
	rec.Spec.Paused = new(sandbox.SandboxPause)
	*rec.Spec.Paused = *paused
	rec.Spec.Paused.SnapshotID = "" // a snapshot does not name itself
	r := s.spec.Request
	meta := snapshot.Meta{Image: s.spec.Image, Tier: s.spec.Tier, Limits: r.Limits, Parent: parent,
		Extra: map[string]string{MetaTenant: s.tenant, MetaSandbox: s.id}}
	if pause {
		meta.Extra[MetaPause] = "true"
	}
	for k, v := range o.extra {
		meta.Extra[k] = v
	}
	m.mu.Unlock()
	if h, err := readHostState(s.pauseDir()); err == nil {
		for _, c := range h.Contexts.Contexts {
			meta.Contexts = append(meta.Contexts, sandbox.CodeContext{ID: c.ID, Language: c.Language, Cwd: c.Cwd})
		}
		for _, p := range h.Processes {
			meta.Processes = append(meta.Processes, p.Info)
		}
	}
	dir, err := s.stage(rec, o.disk)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", s.w.Key(), err)
	}
	defer os.RemoveAll(dir)
	if o.staged != nil {
		o.staged()
	}
	man, err := m.cfg.Snapshots.Write(ctx, id, meta, dir)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", s.w.Key(), err)
	}
	m.log.Info("sandbox snapshot written", "sandbox", s.w.Key(), "snapshot", man.ID, "bytes", man.Stats.LogicalBytes,
		"new_bytes", man.Stats.NewBytes, "new_chunks", man.Stats.NewChunks, "reused_chunks", man.Stats.ReusedChunks)
	return man, nil
}

// stage links what a snapshot holds of the sandbox into a new directory
// beside its own (same file system: links, not copies) and writes its
// record there; the caller removes it. disk, when set, is a copy of the
// disk image to move there instead of linking the sandbox's own.
func (s *Sandbox) stage(rec snapshotRecord, disk string) (string, error) {
	src := s.w.Dir()
	dir, err := os.MkdirTemp(filepath.Dir(src), "."+filepath.Base(src)+".snapshot-")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	for _, name := range []string{"disk.img", accessTokenFile} {
		if name == "disk.img" && disk != "" {
			if err := os.Rename(disk, filepath.Join(dir, name)); err != nil {
				return "", err
			}
			continue
		}
		if err := os.Link(filepath.Join(src, name), filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
	pd := s.pauseDir()
	err = filepath.WalkDir(pd, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == pd {
			return filepath.SkipDir // paused with its files only
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dir, rel), 0o700)
		case !d.Type().IsRegular() || strings.HasSuffix(p, ".tmp"):
			return nil // a socket or half-written file: no part of the saved state
		}
		return os.Link(p, filepath.Join(dir, rel))
	})
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, snapshotRecordFile), b, 0o600); err != nil {
		return "", err
	}
	ok = true
	return dir, nil
}

// Materialize makes a sandbox on this node from a snapshot (see above).
func (m *Manager) Materialize(ctx context.Context, tenant, id, snap string) (*Sandbox, error) {
	if m.cfg.Snapshots == nil {
		return nil, ErrNoSnapshots
	}
	if _, ok := m.table.Lookup(tenant, id); ok {
		return nil, ErrExists
	}
	if err := m.table.Own(ctx, tenant, id); errors.Is(err, workspace.ErrElsewhere) {
		return nil, ErrExists
	} else if err != nil {
		return nil, err
	}
	dir := m.table.Dir(tenant, id)
	// What a failed materialize or a copy removed meanwhile left: the
	// table does not know it.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("materialize %s/%s: %w", tenant, id, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("materialize %s/%s: %w", tenant, id, err)
	}
	if _, err := m.cfg.Snapshots.Restore(ctx, snap, dir); err != nil {
		return nil, fmt.Errorf("materialize %s/%s from snapshot %s: %w", tenant, id, snap, err)
	}
	s, err := m.adopt(ctx, tenant, id, snap, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("materialize %s/%s from snapshot %s: %w", tenant, id, snap, err)
	}
	m.log.Info("sandbox materialized from a snapshot", "sandbox", s.w.Key(), "snapshot", snap)
	return s, nil
}

// adopt makes the sandbox whose snapshot was restored into dir this
// node's: its record read and made its own (a copy's: a new sandbox), the
// workspace added to the table, paused.
func (m *Manager) adopt(ctx context.Context, tenant, id, snap, dir string) (*Sandbox, error) {
	b, err := os.ReadFile(filepath.Join(dir, snapshotRecordFile))
	if err != nil {
		return nil, fmt.Errorf("the snapshot holds no sandbox record: %w", err)
	}
	var rec snapshotRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("the snapshot's sandbox record: %w", err)
	}
	if rec.Spec.Paused == nil {
		return nil, fmt.Errorf("the snapshot's sandbox record: not paused: %w", snapshot.ErrInvalid)
	}
	if err := os.Remove(filepath.Join(dir, snapshotRecordFile)); err != nil {
		return nil, err
	}
	info, spec := rec.Info, rec.Spec
	info.Tenant, info.ID = tenant, id
	spec.Paused.SnapshotID = ""
	if rec.Tenant == tenant && rec.Info.ID == id && rec.Pause {
		// A move: the snapshot is the paused sandbox, which goes with
		// its resume.
		spec.Paused.SnapshotID = snap
	}
	if rec.Tenant != tenant || rec.Info.ID != id {
		// A copy: a sandbox of its own from now on.
		now := m.table.Now().UTC()
		info.CreatedAt, info.LastUsedAt, info.ExpiresAt = now, now, now.Add(m.pausedTTL())
		info.Executions = 0
		spec.Request.SandboxID = id
		spec.Restarts = 0
		if err := os.Remove(filepath.Join(dir, accessTokenFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	s := m.newSandbox(nil, tenant, id, &spec)
	if rec.Tenant == tenant && rec.Info.ID == id {
		s.pauseLost = rec.ProcessesLost
	}
	w, created, err := m.table.Put(info, &spec, nil)
	switch {
	case w == nil && err != nil:
		return nil, err
	case w == nil || !created:
		return nil, ErrExists
	}
	s.w = w
	m.table.SetOccupant(w, s)
	if err != nil {
		m.log.Warn("save a materialized sandbox's record (a restart of this node would not find it)", "sandbox", w.Key(), "err", err)
	}
	m.publish(ctx, s, s.Info())
	return s, nil
}

// Pause = snapshot. With a snapshot store, every pause (a client's, at
// the timeout, idle, a drain's) also writes the paused sandbox to the
// store (MetaPause) and records its id in the sandbox's pause
// (sandbox.SandboxPause.SnapshotID), which its published description
// carries to every node: one that finds its owner gone takes it up from
// there (Manager.TakeOver). The local copy stays: a resume on this node
// reads it and downloads nothing. A resume, a kill and the paused TTL's
// expiry delete the snapshot's manifest; Manager.Run collects the chunks
// no manifest names (snapshot.Store.GC) every gcEvery. A snapshot that
// cannot be written leaves the sandbox paused on this node only (logged).

const (
	// snapshotWait bounds the write of a pause's snapshot, whatever bounds
	// the pause itself (an idle pause waits 2 s for cells).
	snapshotWait = 10 * time.Minute
	// dropWait bounds the removal of a snapshot's manifest.
	dropWait = 30 * time.Second
	// gcEvery is how often a node collects unreferenced chunks.
	gcEvery = 10 * time.Minute
)

// snapshotPausedLocked writes the sandbox just paused to the snapshot
// store (its workspace's lock and s.mu are held) and returns the
// snapshot's id; "" without a store or when the write failed (logged).
func (s *Sandbox) snapshotPausedLocked(ctx context.Context) string {
	if s.m.cfg.Snapshots == nil || !s.m.cfg.PauseSnapshots {
		return ""
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), snapshotWait)
	defer cancel()
	man, err := s.snapshotLocked(sctx, "", "", true)
	if err != nil {
		s.m.log.Warn("write a paused sandbox to the snapshot store; only this node can resume it", "sandbox", s.w.Key(), "err", err)
		return ""
	}
	return man.ID
}

// dropSnapshot deletes snapshot id, a paused sandbox's that no longer
// is (""; nothing); a failure is logged, and leaves the snapshot to
// nobody.
func (m *Manager) dropSnapshot(ctx context.Context, sandboxKey, id string) {
	if id == "" || m.cfg.Snapshots == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropWait)
	defer cancel()
	if err := m.cfg.Snapshots.Delete(dctx, id); err != nil && !errors.Is(err, snapshot.ErrNotFound) {
		m.log.Warn("delete a paused sandbox's snapshot", "sandbox", sandboxKey, "snapshot", id, "err", err)
	}
}

// collect removes the chunks no snapshot names, unless a write is under
// way (tried again at the next round).
func (m *Manager) collect(ctx context.Context) {
	st, err := m.cfg.Snapshots.GC(ctx)
	switch {
	case errors.Is(err, snapshot.ErrBusy) || ctx.Err() != nil:
	case err != nil:
		m.log.Warn("collect unreferenced snapshot chunks", "err", err)
	default:
		m.log.Debug("snapshot chunks collected", "stats", st)
	}
}
