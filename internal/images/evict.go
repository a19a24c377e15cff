package images

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// ErrNoRoom is a build or import that does not fit in the budget even
// after evicting every image not in use.
var ErrNoRoom = errors.New("not enough room in the image budget")

// Remove deletes the image name. Its files go at once unless a sandbox
// still runs on them; then they go at the next change to the store after
// it ends, and deferred is true. Files another name shares stay with it.
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
	if err := os.Remove(s.recordPath(name)); err != nil {
		return false, fmt.Errorf("remove image %s: %w", name, err)
	}
	s.gc()
	if _, err := os.Stat(s.versionDir(rec.Version)); err != nil {
		return false, nil
	}
	// Still there: a sandbox runs on it, or another name has the same
	// content and keeps it. The name is gone either way, so a failure to
	// list the others is no failure of the removal.
	recs, _ := s.records()
	return references(recs)[rec.Version] == 0, nil
}

// makeRoom evicts least recently used images, other than name and those in
// use, until a version of size bytes fits in the budget. It evicts nothing
// if that cannot be enough. The store lock must be held.
func (s *Store) makeRoom(name, version string, size int64) ([]string, error) {
	recs, err := s.records()
	if err != nil {
		return nil, err
	}
	versions := map[string]usage{}
	entries, _ := os.ReadDir(s.path("versions"))
	for _, e := range entries {
		v := e.Name()
		m, _ := readMeta(s.versionDir(v))
		versions[v] = usage{size: m.Size, inUse: s.inUse(v), lastUsed: s.lastUsed(v)}
	}
	plan, err := planEviction(s.cfg.Budget, recs, versions, name, version, size)
	if err != nil {
		return nil, err
	}
	refs := references(recs)
	var evicted []string
	for _, r := range plan {
		if err := os.Remove(s.recordPath(r.Name)); err != nil {
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
		s.cfg.Log.Info("evicted image", "image", r.Name, "size", versions[r.Version].size, "for", name)
		evicted = append(evicted, r.Name)
	}
	return evicted, nil
}

// usage is what eviction knows of one stored version.
type usage struct {
	size     int64
	inUse    bool
	lastUsed time.Time
}

// planEviction chooses the images to evict so that version, of size bytes,
// fits in budget as name: least recently used first (by name among equals),
// never name itself, an image on version or one in use. versions describes
// every version on disk; a version none of recs refers to still counts
// (gc removes it after the install). Replacing name frees its old version
// unless another name or a sandbox holds it. The plan is empty when the new
// version fits already; if evicting every candidate would not be enough
// it fails with ErrNoRoom and plans nothing.
func planEviction(budget int64, recs []record, versions map[string]usage, name, version string, size int64) ([]record, error) {
	refs := references(recs)
	var used int64
	for _, u := range versions {
		used += u.size
	}
	need := size
	if _, ok := versions[version]; ok {
		need = 0
	}
	for _, r := range recs {
		if r.Name == name && r.Version != version && refs[r.Version] == 1 && !versions[r.Version].inUse {
			used -= versions[r.Version].size
		}
	}
	if used+need <= budget {
		return nil, nil
	}
	var cands []record
	for _, r := range recs {
		if r.Name != name && r.Version != version && !versions[r.Version].inUse {
			cands = append(cands, r)
		}
	}
	slices.SortFunc(cands, func(a, b record) int {
		return cmp.Or(versions[a.Version].lastUsed.Compare(versions[b.Version].lastUsed), strings.Compare(a.Name, b.Name))
	})
	// Plan first: evict nothing unless evicting is enough.
	free := used
	var plan []record
	for _, r := range cands {
		if free+need <= budget {
			break
		}
		plan = append(plan, r)
		if refs[r.Version]--; refs[r.Version] == 0 {
			free -= versions[r.Version].size
		}
	}
	if free+need > budget {
		return nil, fmt.Errorf("%w: %s needs %s; the budget is %s and images in use keep %s",
			ErrNoRoom, name, FormatSize(need), FormatSize(budget), FormatSize(free))
	}
	return plan, nil
}

// references counts the names that refer to each version.
func references(recs []record) map[string]int {
	refs := map[string]int{}
	for _, r := range recs {
		refs[r.Version]++
	}
	return refs
}

// gc removes versions no name refers to and that no sandbox holds, and
// what dead builds left in tmp/. The store lock must be held.
func (s *Store) gc() {
	defer s.sweepTmp()
	recs, err := s.records()
	if err != nil {
		// Without the names every version would look unreferenced.
		s.cfg.Log.Warn("keep unused image versions until the names can be read", "err", err)
		return
	}
	refs := references(recs)
	entries, _ := os.ReadDir(s.path("versions"))
	for _, e := range entries {
		if refs[e.Name()] == 0 {
			if ok, err := s.removeVersion(e.Name()); err != nil {
				s.cfg.Log.Warn("remove unused image version", "version", e.Name(), "err", err)
			} else if ok {
				s.cfg.Log.Info("removed unused image version", "version", e.Name())
			}
		}
	}
}

// removeVersion deletes version v unless a sandbox holds it; it reports
// whether it did.
func (s *Store) removeVersion(v string) (bool, error) {
	vdir := s.versionDir(v)
	f, err := os.Open(s.lockPath(v))
	if err == nil {
		if free, err := tryLock(f); err != nil || !free {
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
	s.forgetIndex(v)
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("remove image version %s: %w", v, err)
	}
	return true, nil
}
