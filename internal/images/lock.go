package images

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// A version is in use while a sandbox runs on it: its user keeps a shared
// flock on versions/HEX/lock. Locks are seen across processes and end with
// the process that took them, so a crash never leaves an image locked. The
// lock file's mtime is when the version was last used, so LRU order
// survives restarts.

// lockPath is version v's lock file.
func (s *Store) lockPath(v string) string { return filepath.Join(s.versionDir(v), "lock") }

// Lock marks img in use until unlock is called (a shared flock on its
// version): eviction and removal leave it alone meanwhile, and its
// last-used time becomes now. It fails with ErrNotFound if the image was
// removed after it was resolved.
func (s *Store) Lock(img Image) (unlock func(), err error) {
	if img.Name == HostName {
		return func() {}, nil
	}
	vdir := filepath.Dir(img.Rootfs)
	if filepath.Dir(vdir) != s.path("versions") {
		return nil, fmt.Errorf("image %s: rootfs %s is not in this store", img.Name, img.Rootfs)
	}
	removed := fmt.Errorf("%w: %s (%s) was removed after the execution was accepted", ErrNotFound, img.Name, img.Digest)
	lock := s.lockPath(filepath.Base(vdir))
	f, err := os.Open(lock)
	if err != nil {
		return nil, removed
	}
	if err := flock(f, unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock image %s: %w", img.Name, err)
	}
	// A removal renames the version away while it holds the lock
	// exclusively: what we locked must still be the version's.
	if !sameFile(f, lock) {
		f.Close()
		return nil, removed
	}
	if err := touch(lock); err != nil {
		s.cfg.Log.Warn("record image use", "image", img.Name, "err", err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

// inUse reports whether a sandbox locks version v.
func (s *Store) inUse(v string) bool {
	f, err := os.Open(s.lockPath(v))
	if err != nil {
		return false
	}
	defer f.Close()
	free, err := tryLock(f)
	return err != nil || !free
}

// lastUsed is when a sandbox last started on version v, or when it was
// installed.
func (s *Store) lastUsed(v string) time.Time {
	fi, err := os.Stat(s.lockPath(v))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// touch sets p's modification time to now: a version's last use.
func touch(p string) error {
	now := time.Now()
	return os.Chtimes(p, now, now)
}

// flock applies a blocking lock operation, retrying when a signal
// interrupts it.
func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

// Held reports whether a process holds an exclusive flock on the file at
// path: a build in progress (an image's, runsc's in scripts/deps.sh). The
// look takes a shared lock and drops it at once, so a build about to start
// waits for its lock, never fails for it; the kernel drops a flock with
// the last process holding it, so a build that died is never taken for
// one in progress.
func Held(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := flock(f, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return err == unix.EWOULDBLOCK
	}
	_ = flock(f, unix.LOCK_UN)
	return false
}

// tryLock takes an exclusive lock on f without waiting: false (and no
// error) if another open file holds a lock on it. The lock lasts until f is
// closed.
func tryLock(f *os.File) (bool, error) {
	switch err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err {
	case nil:
		return true, nil
	case unix.EWOULDBLOCK:
		return false, nil
	default:
		return false, err
	}
}

// sameFile reports whether the open file f is still the file at p.
func sameFile(f *os.File, p string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(p)
	return err == nil && os.SameFile(a, b)
}
