package images

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// stage is a build or import in progress: a directory in tmp/ shaped like
// a version, locked by its builder.
type stage struct {
	dir  string
	lock *os.File
}

func (s *Store) newStage() (*stage, error) {
	if err := s.makeDirs(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(s.path("tmp"), "stage-")
	if err != nil {
		return nil, fmt.Errorf("create stage: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create stage: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err == nil {
		err = flock(f, unix.LOCK_EX)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("lock stage: %w", err)
	}
	return &stage{dir: dir, lock: f}, nil
}

// discard removes what is left of the stage (nothing once installed).
func (st *stage) discard() {
	st.lock.Close()
	removeStage(st.dir)
}

// removeStage deletes a stage directory, first detaching anything a
// killed mmdebstrap left mounted in its chroot (/proc, /sys, /dev), so the
// removal never reaches into them.
func removeStage(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, mp := range mountsUnder(b, dir) {
		_ = unix.Unmount(mp, unix.MNT_DETACH)
	}
	os.RemoveAll(dir)
}

// sweepTmp removes what dead builds and imports left in tmp/ (stages whose
// builder is gone) and the remains of removed versions. The store lock must
// be held.
func (s *Store) sweepTmp() {
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
		if free, _ := tryLock(f); free {
			removeStage(p)
		}
		f.Close()
	}
}

// finish applies Corral's layout to the stage's rootfs, indexes its
// modules and computes its digest.
func (s *Store) finish(st *stage, env []string, progress func(string, float64)) (meta, error) {
	rootfs := filepath.Join(st.dir, "rootfs")
	progress("applying Corral's layout", 0.90)
	if err := applyLayout(rootfs, s.cfg.UID, s.cfg.GID); err != nil {
		return meta{}, fmt.Errorf("apply layout: %w", err)
	}
	progress("indexing modules", 0.92)
	idx, err := scanModules(rootfs, env)
	if err != nil {
		return meta{}, fmt.Errorf("index modules: %w", err)
	}
	if err := writeIndex(filepath.Join(st.dir, "modules.json"), idx); err != nil {
		return meta{}, fmt.Errorf("write module index: %w", err)
	}
	progress("computing digest", 0.94)
	digest, size, err := treeDigest(rootfs, env)
	if err != nil {
		return meta{}, err
	}
	m := meta{Digest: digest, Size: size, Env: env}
	b, _ := json.MarshalIndent(m, "", " ")
	if err := writeFileAtomic(filepath.Join(st.dir, "image.json"), append(b, '\n'), 0o644); err != nil {
		return meta{}, fmt.Errorf("write image metadata: %w", err)
	}
	return m, nil
}

// install makes the stage the version rec names, evicting least recently
// used images not in use if the budget needs room.
func (s *Store) install(st *stage, m meta, rec record) (Info, error) {
	unlock, err := s.lockStore()
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	s.gc()
	rec.Version = strings.TrimPrefix(m.Digest, "sha256:")
	rec.Created = time.Now().UTC()
	evicted, err := s.makeRoom(rec.Name, rec.Version, m.Size)
	if err != nil {
		return Info{Evicted: evicted}, err
	}
	vdir := s.versionDir(rec.Version)
	if _, err := os.Stat(vdir); err == nil {
		st.discard() // the same content is already here
	} else {
		if err := os.Rename(st.dir, vdir); err != nil {
			return Info{}, fmt.Errorf("install image %s: %w", rec.Name, err)
		}
		st.lock.Close()
	}
	// A new image counts as just used, so the next eviction spares it.
	_ = touch(s.lockPath(rec.Version))
	b, _ := json.MarshalIndent(rec, "", " ")
	if err := writeFileAtomic(s.recordPath(rec.Name), append(b, '\n'), 0o644); err != nil {
		return Info{}, fmt.Errorf("install image %s: %w", rec.Name, err)
	}
	s.gc()
	info := s.info(rec)
	info.Evicted = evicted
	return info, nil
}

// Building reports whether a build or import of name is in progress:
// whether a process (`corral image build` or `import`, this one or another
// on the same store) holds the lock buildLock takes. A shared lock, dropped at
// once, is the look: a build about to start waits for it, never fails for
// it, and the kernel drops a dead build's lock, so a build that died is
// never taken for one in progress.
func (s *Store) Building(name string) bool {
	if CheckName(name) != nil {
		return false
	}
	return Held(s.buildLockPath(name))
}

// buildLockPath is the file a build of name holds locked while it runs.
func (s *Store) buildLockPath(name string) string { return s.path("tmp", "build-"+name+".lock") }

// buildLock serialises builds and imports of one name across processes.
func (s *Store) buildLock(ctx context.Context, name string) (func(), error) {
	if err := s.makeDirs(); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(s.buildLockPath(name), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open build lock: %w", err)
	}
	for {
		free, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock build of %s: %w", name, err)
		}
		if free {
			return func() { f.Close() }, nil
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
