package images

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoRoom is a build or import that does not fit in the budget even
// after evicting every image not in use.
var ErrNoRoom = errors.New("not enough room in the image budget")

// Remove deletes the image name. Its files go at once unless a sandbox
// still runs on them; then they go at the next change to the store after
// it ends, and deferred is true.
func (s *Store) Remove(name string) (deferred bool, err error) {
	if name == HostName {
		return false, fmt.Errorf("image %s is built in and cannot be removed", HostName)
	}
	unlock, err := s.lockStore()
	if err != nil {
		return false, err
	}
	defer unlock()
	rec, err := s.record(name)
	if err != nil {
		return false, err
	}
	if err := os.Remove(s.path("names", name+".json")); err != nil {
		return false, fmt.Errorf("remove image %s: %w", name, err)
	}
	s.gc()
	_, err = os.Stat(s.versionDir(rec.Version))
	return err == nil, nil
}

// makeRoom evicts least recently used images, other than name and those in
// use, until a version of size bytes fits in the budget. It evicts nothing
// if that cannot be enough. The store lock must be held.
func (s *Store) makeRoom(name, version string, size int64) ([]string, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	entries, _ := os.ReadDir(s.path("versions"))
	for _, e := range entries {
		m, _ := readMeta(s.versionDir(e.Name()))
		sizes[e.Name()] = m.Size
	}
	refs := map[string]int{}
	for _, r := range recs {
		refs[r.Version]++
	}
	var used int64
	for _, sz := range sizes {
		used += sz
	}
	need := size
	if _, ok := sizes[version]; ok {
		need = 0
	}
	// Replacing name frees its old version if nothing else holds it.
	for _, r := range recs {
		if r.Name == name && r.Version != version && refs[r.Version] == 1 && !s.inUse(r.Version) {
			used -= sizes[r.Version]
		}
	}
	if used+need <= s.cfg.Budget {
		return nil, nil
	}
	type cand struct {
		rec  record
		last time.Time
	}
	var cands []cand
	for _, r := range recs {
		if r.Name != name && r.Version != version && !s.inUse(r.Version) {
			cands = append(cands, cand{r, s.lastUsed(r.Version)})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(a.last.Compare(b.last), strings.Compare(a.rec.Name, b.rec.Name))
	})
	// Plan first: evict nothing unless evicting is enough.
	free, left := used, maps.Clone(refs)
	var plan []record
	for _, c := range cands {
		if free+need <= s.cfg.Budget {
			break
		}
		plan = append(plan, c.rec)
		if left[c.rec.Version]--; left[c.rec.Version] == 0 {
			free -= sizes[c.rec.Version]
		}
	}
	if free+need > s.cfg.Budget {
		return nil, fmt.Errorf("%w: %s needs %s; the budget is %s and images in use keep %s",
			ErrNoRoom, name, FormatSize(need), FormatSize(s.cfg.Budget), FormatSize(free))
	}
	var evicted []string
	for _, r := range plan {
		if err := os.Remove(s.path("names", r.Name+".json")); err != nil {
			return evicted, fmt.Errorf("evict image %s: %w", r.Name, err)
		}
		refs[r.Version]--
		if refs[r.Version] == 0 {
			if ok, err := s.removeVersion(r.Version); err != nil || !ok {
				// Acquired since the plan was made: its files stay until
				// it is released.
				s.cfg.Log.Warn("evicted image still in use; files kept until released", "image", r.Name, "err", err)
			}
		}
		s.cfg.Log.Info("evicted image", "image", r.Name, "size", sizes[r.Version], "for", name)
		evicted = append(evicted, r.Name)
	}
	return evicted, nil
}

// gc removes versions no name refers to and that no sandbox holds, and
// what dead builds left in tmp/. The store lock must be held.
func (s *Store) gc() {
	recs, _ := s.records()
	ref := map[string]bool{}
	for _, r := range recs {
		ref[r.Version] = true
	}
	entries, _ := os.ReadDir(s.path("versions"))
	for _, e := range entries {
		if !ref[e.Name()] {
			if ok, err := s.removeVersion(e.Name()); err != nil {
				s.cfg.Log.Warn("remove unused image version", "version", e.Name(), "err", err)
			} else if ok {
				s.cfg.Log.Info("removed unused image version", "version", e.Name())
			}
		}
	}
	tmp, _ := os.ReadDir(s.path("tmp"))
	for _, e := range tmp {
		p := s.path("tmp", e.Name())
		if strings.HasPrefix(e.Name(), "trash-") {
			removeStage(p)
			continue
		}
		if !strings.HasPrefix(e.Name(), "stage-") {
			continue
		}
		// A stage's lock is held by its builder for as long as it lives.
		f, err := os.Open(filepath.Join(p, "lock"))
		if err != nil {
			if fi, serr := os.Stat(p); serr == nil && time.Since(fi.ModTime()) > time.Hour {
				removeStage(p)
			}
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			removeStage(p)
		}
		f.Close()
	}
}

// removeVersion deletes version v unless a sandbox holds it; it reports
// whether it did.
func (s *Store) removeVersion(v string) (bool, error) {
	vdir := s.versionDir(v)
	f, err := os.Open(filepath.Join(vdir, "lock"))
	if err == nil {
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			return false, nil
		}
	}
	trash := s.path("tmp", "trash-"+v+"-"+randomHex())
	err = os.Rename(vdir, trash)
	// An Acquire waiting on the lock finds the version gone at once
	// rather than after the removal below.
	if f != nil {
		f.Close()
	}
	if err != nil {
		return false, fmt.Errorf("remove image version %s: %w", v, err)
	}
	s.mu.Lock()
	delete(s.indexes, v)
	s.mu.Unlock()
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("remove image version %s: %w", v, err)
	}
	return true, nil
}
