package snapshot

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/blob"
)

// GCStats say what a GC found and removed.
type GCStats struct {
	Manifests int `json:"manifests"`
	// Chunks counts the chunks stored when GC listed them; Deleted those
	// it removed and DeletedBytes their stored size.
	Chunks       int   `json:"chunks"`
	Deleted      int   `json:"deleted"`
	DeletedBytes int64 `json:"deleted_bytes"`
	// Young counts unreferenced chunks kept for being younger than Lease.
	Young int `json:"young"`
	// DeadWrites counts markers of Writes that stopped renewing them
	// (their process died), removed.
	DeadWrites int `json:"dead_writes"`
}

// GC removes the chunks that no snapshot's manifest names and that are
// older than Lease. It returns ErrBusy, having removed nothing, while a
// Write is in progress anywhere on the store; Writes that start while it
// runs wait for it, and a sweep longer than a second stops for them too
// (ErrBusy, with the stats of what it removed; see the package comment). An unreadable manifest
// stops it before it removes anything: it cannot tell what that snapshot
// holds.
func (s *Store) GC(ctx context.Context) (GCStats, error) {
	var st GCStats
	l, err := s.take(ctx, s.prefix+gcDir+newID(), []byte(`{}`))
	if err != nil {
		return st, fmt.Errorf("snapshot gc: announce: %w", err)
	}
	defer l.release(ctx)
	now := l.start
	live, dead, err := s.live(ctx, writesDir, now)
	if err != nil {
		return st, fmt.Errorf("snapshot gc: %w", err)
	}
	if len(live) > 0 {
		return st, fmt.Errorf("snapshot gc: %d writes in progress: %w", len(live), ErrBusy)
	}
	for _, o := range dead {
		if err := s.blobs.Delete(ctx, o.Key); err != nil {
			return st, fmt.Errorf("snapshot gc: %w", err)
		}
		st.DeadWrites++
	}

	refs := map[string]bool{}
	objs, err := s.blobs.List(ctx, s.prefix+manifestsDir)
	if err != nil {
		return st, fmt.Errorf("snapshot gc: %w", err)
	}
	for _, o := range objs {
		m, err := s.Get(ctx, strings.TrimPrefix(o.Key, s.prefix+manifestsDir))
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return st, fmt.Errorf("snapshot gc: %w", err)
		}
		st.Manifests++
		for _, f := range m.Files {
			for _, h := range f.Chunks {
				refs[h] = true
			}
		}
	}

	chunks, err := s.blobs.List(ctx, s.prefix+chunksDir)
	if err != nil {
		return st, fmt.Errorf("snapshot gc: %w", err)
	}
	st.Chunks = len(chunks)
	cutoff := now.Add(-s.lease)
	checked := time.Now()
	for _, o := range chunks {
		h := path.Base(o.Key)
		if refs[h] {
			continue
		}
		if !o.ModTime.Before(cutoff) {
			st.Young++
			continue
		}
		if err := l.held(); err != nil {
			return st, fmt.Errorf("snapshot gc: %w", err)
		}
		// A Write that started meanwhile waits for this GC: yield to it
		// rather than hold it up for a long sweep.
		if time.Since(checked) > time.Second {
			checked = time.Now()
			if err := s.writing(ctx, l); err != nil {
				return st, fmt.Errorf("snapshot gc: %w", err)
			}
		}
		if err := s.blobs.Delete(ctx, o.Key); err != nil && !errors.Is(err, blob.ErrNotFound) {
			return st, fmt.Errorf("snapshot gc: %w", err)
		}
		st.Deleted++
		st.DeletedBytes += o.Size
	}
	return st, nil
}

// writing returns ErrBusy if a Write's marker is live, by the store's time
// of l's marker.
func (s *Store) writing(ctx context.Context, l *lease) error {
	self, err := s.blobs.Stat(ctx, l.key)
	if err != nil {
		return err
	}
	live, _, err := s.live(ctx, writesDir, self.ModTime)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return fmt.Errorf("%d writes started: %w", len(live), ErrBusy)
	}
	return nil
}
