package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/sandbox"
)

// Sandboxes move between nodes through the snapshot store (snapstore.go),
// their ownership through the cluster (Mover).
//
// Drain (SIGTERM): the node pauses each live sandbox it owns (gVisor with
// its memory, runc with its files: its processes end, as a pause's do),
// which writes it to the store, then hands it off (Mover.HandOff: owned by
// no node, its published description, which names the snapshot, kept)
// and removes its local copy. One that cannot be moved before the drain's
// deadline stays on this node's disk, where a restart of the node makes it
// again (its files kept).
//
// TakeOver: a call for a sandbox whose owner handed it off, or was lost
// with it paused in the store, makes it this node's (Mover.TakeOver: of
// nodes that race, one wins; the others forward to it) and materializes
// it, paused as it was; the call goes on as on its old node (a sandbox the
// server paused — a drain, its timeout, idle — resumes for it).
//
// Meanwhile calls for a sandbox arriving or leaving wait (Settle): one
// that finds it left is routed anew by the caller.

// Mover moves the ownership of sandboxes between nodes (cluster.Cluster).
type Mover interface {
	// HandOff gives a sandbox this node owns to no node, its published
	// description kept, for any node to take over.
	HandOff(ctx context.Context, tenant, id string) error
	// TakeOver makes a sandbox owned by node from (handed off, or lost)
	// this node's; false when another node took it first.
	TakeOver(ctx context.Context, tenant, id, from string) (bool, error)
}

const (
	// takeOverWait bounds a takeover (the snapshot's download), whatever
	// bounds the call that asked for it.
	takeOverWait = 5 * time.Minute
	// drainParallel bounds the sandboxes a drain moves at once: much of
	// a move is waiting (a checkpoint, a disk's release, uploads).
	drainParallel = 8
	// handOffWait bounds the hand-off of a sandbox written to the store.
	handOffWait = 5 * time.Second
)

// ErrMoved: a call reached this node for a sandbox its drain moved off
// it meanwhile (the call was routed before); sent again, it reaches the
// sandbox's new node.
var ErrMoved = &fault.Error{Kind: fault.Unavailable, Code: "sandbox_unavailable", Field: "sandbox_id",
	RetryAfter: time.Second, Message: "the sandbox moved to another node during the call; retry"}

// notHere is the error of a call for tenant's sandbox id that this node
// does not hold: ErrMoved if its drain moved it off, else ErrNotFound.
func (m *Manager) notHere(tenant, id string) error {
	m.moves.mu.Lock()
	defer m.moves.mu.Unlock()
	if m.moves.left[moveKey(tenant, id)] {
		return ErrMoved
	}
	return ErrNotFound
}

// ErrDraining: this node is being drained and takes no sandbox over.
var ErrDraining = &fault.Error{Kind: fault.Unavailable, Code: "sandbox_unavailable", Field: "sandbox_id",
	RetryAfter: time.Second, Message: "the sandbox is moving between nodes; retry"}

// move is a sandbox arriving on this node or leaving it.
type move struct {
	done chan struct{}
	err  error
}

// moveKey is a sandbox's key in moves: its workspace's (Workspace.Key).
func moveKey(tenant, id string) string { return tenant + "/" + id }

// moves is what a Manager knows of moves. Its methods are safe for
// concurrent use.
type moves struct {
	mu       sync.Mutex
	draining bool
	now      map[string]*move // by tenant/id, in progress
	left     map[string]bool  // by tenant/id, handed off by this node
}

// start registers a move of key; an earlier one in progress is returned
// instead (first false).
func (ms *moves) start(key string) (mv *move, first bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if mv := ms.now[key]; mv != nil {
		return mv, false
	}
	if ms.now == nil {
		ms.now = map[string]*move{}
	}
	mv = &move{done: make(chan struct{})}
	ms.now[key] = mv
	return mv, true
}

// markLeft records that the sandbox of key left this node.
func (ms *moves) markLeft(key string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	ms.markLeftLocked(key)
}

func (ms *moves) markLeftLocked(key string) {
	if ms.left == nil {
		ms.left = map[string]bool{}
	}
	ms.left[key] = true
}

// end ends move mv of key with err; left: the sandbox left this node.
func (ms *moves) end(key string, mv *move, err error, left bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if left {
		ms.markLeftLocked(key)
	}
	delete(ms.now, key)
	mv.err = err
	close(mv.done)
}

// Settle waits for a move of tenant's sandbox id under way on this node
// to end, and reports whether the sandbox left this node (a drain handed
// it off): the caller then routes its call anew.
func (m *Manager) Settle(ctx context.Context, tenant, id string) (left bool, err error) {
	k := moveKey(tenant, id)
	m.moves.mu.Lock()
	mv := m.moves.now[k]
	m.moves.mu.Unlock()
	if mv != nil {
		select {
		case <-mv.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	m.moves.mu.Lock()
	defer m.moves.mu.Unlock()
	return m.moves.left[k], nil
}

// Draining reports whether Drain was called.
func (m *Manager) Draining() bool {
	m.moves.mu.Lock()
	defer m.moves.mu.Unlock()
	return m.moves.draining
}

// Has reports whether this node holds tenant's sandbox id.
func (m *Manager) Has(tenant, id string) bool {
	_, err := m.Get(tenant, id)
	return err == nil
}

// Movable reports whether sandboxes move between nodes here: a snapshot
// store that pauses write to, and a cluster to move their ownership.
func (m *Manager) Movable() bool {
	return m.cfg.Snapshots != nil && m.cfg.PauseSnapshots && m.mover != nil
}

// TakeOver takes tenant's sandbox id over from node from, which published
// it paused as snapshot snap (see above). ErrElsewhere: another node took
// it first. A failure after the sandbox became this node's hands it off
// again, for the next call to try.
func (m *Manager) TakeOver(ctx context.Context, tenant, id, from, snap string) error {
	if !m.Movable() {
		return ErrNoSnapshots
	}
	if m.Draining() {
		return ErrDraining
	}
	k := moveKey(tenant, id)
	mv, first := m.moves.start(k)
	if !first {
		select {
		case <-mv.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return mv.err
	}
	err := m.takeOver(ctx, tenant, id, from, snap)
	m.moves.end(k, mv, err, false)
	return err
}

func (m *Manager) takeOver(ctx context.Context, tenant, id, from, snap string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), takeOverWait)
	defer cancel()
	if m.Has(tenant, id) {
		return nil // taken over by an earlier call
	}
	start := time.Now()
	ok, err := m.mover.TakeOver(ctx, tenant, id, from)
	if err != nil {
		return fmt.Errorf("take over %s/%s: %w", tenant, id, err)
	}
	if !ok {
		return ErrElsewhere
	}
	if _, err := m.Materialize(ctx, tenant, id, snap); err != nil {
		if herr := m.mover.HandOff(ctx, tenant, id); herr != nil {
			err = errors.Join(err, herr)
		}
		return fmt.Errorf("take over %s/%s: %w", tenant, id, err)
	}
	m.log.Info("sandbox taken over", "sandbox", moveKey(tenant, id), "from", from, "snapshot", snap,
		"duration_ms", time.Since(start).Milliseconds())
	return nil
}

// Drain moves every live sandbox of this node to the snapshot store and
// hands it off (see above), drainParallel at once, until ctx ends; from
// now on the node takes none over. Without a snapshot store or a cluster
// it does nothing: the sandboxes stay on the node's disk.
func (m *Manager) Drain(ctx context.Context) {
	if !m.Movable() {
		return
	}
	m.moves.mu.Lock()
	m.moves.draining = true
	m.moves.mu.Unlock()
	sem := make(chan struct{}, drainParallel)
	var wg sync.WaitGroup
	moved, failed := 0, 0
	var mu sync.Mutex
	start := time.Now()
	for _, w := range m.table.All() {
		s, ok := m.table.State(w).Occupant.(*Sandbox)
		if !ok {
			continue
		}
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
			}
			if ctx.Err() != nil {
				m.log.Warn("drain ended before a sandbox was moved; it stays on this node's disk", "sandbox", w.Key())
				mu.Lock()
				failed++
				mu.Unlock()
				return
			}
			defer func() { <-sem }()
			err := s.handOff(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				m.log.Warn("move a sandbox off a draining node; it stays on this node's disk", "sandbox", w.Key(), "err", err)
				return
			}
			moved++
		})
	}
	wg.Wait()
	m.log.Info("sandboxes moved off the node", "moved", moved, "failed", failed, "duration_ms", time.Since(start).Milliseconds())
}

// handOff moves the sandbox off this node: paused (and so written to the
// store) if it runs, written if its pause was not, handed off, removed
// here. Calls for it wait meanwhile (Settle).
func (s *Sandbox) handOff(ctx context.Context) (err error) {
	m := s.m
	k := s.w.Key()
	mv, first := m.moves.start(k)
	if !first {
		return fmt.Errorf("hand off %s: it is moving already", k)
	}
	left := false
	defer func() { m.moves.end(k, mv, err, left) }()
	if err := s.lock(ctx); errors.Is(err, ErrNotFound) {
		return nil // removed meanwhile
	} else if err != nil {
		return err
	}
	defer s.w.Unlock()
	if !s.paused() {
		if err := s.pauseLocked(ctx, sandbox.PauseDrain, true); err != nil && !errors.Is(err, ErrPaused) {
			return err
		}
	}
	m.mu.Lock()
	snap := s.spec.Paused.SnapshotID
	m.mu.Unlock()
	if snap == "" {
		// Paused before (without a store, or its write failed): now.
		s.mu.Lock()
		man, err := s.snapshotLocked(ctx, "", "", true)
		s.mu.Unlock()
		if err != nil {
			return err
		}
		snap = man.ID
		m.mu.Lock()
		s.spec.Paused.SnapshotID = snap
		s.saveLocked()
		info := s.infoLocked()
		m.mu.Unlock()
		m.publish(ctx, s, info)
	}
	// Written: handing it off is one write to the store, worth doing
	// past the drain's deadline.
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handOffWait)
	defer cancel()
	if err := m.mover.HandOff(hctx, s.tenant, s.id); err != nil {
		return err
	}
	// Its snapshot is the sandbox now, another node's to take: the local
	// copy goes, the snapshot stays.
	m.mu.Lock()
	s.spec.Paused.SnapshotID = ""
	m.mu.Unlock()
	left = true
	// Left before it goes: a call that waited for its lock meanwhile
	// learns that it moved (ErrMoved), not that it never was.
	m.moves.markLeft(k)
	if err := m.table.Remove(s.w); err != nil {
		m.log.Warn("remove a handed-off sandbox's local copy", "sandbox", k, "err", err)
	}
	m.log.Info("sandbox handed off", "sandbox", k, "snapshot", snap)
	return nil
}
