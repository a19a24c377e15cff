package images

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Acquire marks img in use until release is called: eviction and removal
// leave it alone meanwhile, and its last-used time becomes now. It fails
// with ErrNotFound if the image was removed after it was resolved. The
// hold is a shared lock on the version's lock file, so it is seen by other
// processes and ends with the process.
func (s *Store) Acquire(img Image) (release func(), err error) {
	if img.Name == HostName {
		return func() {}, nil
	}
	vdir := filepath.Dir(img.Rootfs)
	if filepath.Dir(vdir) != s.path("versions") {
		return nil, fmt.Errorf("image %s: rootfs %s is not in this store", img.Name, img.Rootfs)
	}
	lock := filepath.Join(vdir, "lock")
	f, err := os.Open(lock)
	if err != nil {
		return nil, fmt.Errorf("%w: %s (%s) was removed after the execution was accepted", ErrNotFound, img.Name, img.Digest)
	}
	if err := flock(f, unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock image %s: %w", img.Name, err)
	}
	// A removal renames the version away while it holds the lock
	// exclusively: what we locked must still be the version's.
	if !sameFile(f, lock) {
		f.Close()
		return nil, fmt.Errorf("%w: %s (%s) was removed after the execution was accepted", ErrNotFound, img.Name, img.Digest)
	}
	now := time.Now()
	if err := os.Chtimes(lock, now, now); err != nil {
		s.cfg.Log.Warn("record image use", "image", img.Name, "err", err)
	}
	var once sync.Once
	return func() { once.Do(func() { f.Close() }) }, nil
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			return err
		}
	}
}

func sameFile(f *os.File, p string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(p)
	return err == nil && os.SameFile(a, b)
}

// inUse reports whether a sandbox holds version v.
func (s *Store) inUse(v string) bool {
	f, err := os.Open(filepath.Join(s.versionDir(v), "lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}

func (s *Store) lastUsed(v string) time.Time {
	fi, err := os.Stat(filepath.Join(s.versionDir(v), "lock"))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}
