package images

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestTryLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	open := func() *os.File {
		t.Helper()
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	holder, other := open(), open()
	if err := flock(holder, unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	if free, err := tryLock(other); free || err != nil {
		t.Fatalf("tryLock with a shared lock held elsewhere = %v, %v; want false, nil", free, err)
	}
	holder.Close()
	if free, err := tryLock(other); !free || err != nil {
		t.Fatalf("tryLock of a free file = %v, %v; want true, nil", free, err)
	}
	if free, err := tryLock(open()); free || err != nil {
		t.Fatalf("tryLock with an exclusive lock held elsewhere = %v, %v; want false, nil", free, err)
	}
}

// storeVersion installs version v under name by hand, as install leaves
// it, with no build or import (they need root).
func storeVersion(t *testing.T, s *Store, name, v string) {
	t.Helper()
	if err := s.makeDirs(); err != nil {
		t.Fatal(err)
	}
	vdir := s.versionDir(v)
	if err := os.MkdirAll(filepath.Join(vdir, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	m, _ := json.Marshal(meta{Digest: "sha256:" + v, Size: 1})
	r, _ := json.Marshal(record{Name: name, Version: v, Source: "import"})
	for p, b := range map[string][]byte{
		filepath.Join(vdir, "image.json"): m,
		s.lockPath(v):                     nil,
		s.recordPath(name):                r,
	} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHolds is TestRemoveInUse (store_sandbox_test.go) without root: a held image
// is in use, is never removed under a sandbox, and one removed after it was
// resolved cannot be acquired.
func TestHolds(t *testing.T) {
	s := New(Config{Dir: t.TempDir()})
	storeVersion(t, s, "a", "aaaa")
	img, err := s.Resolve("a")
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(s.lockPath("aaaa"), old, old); err != nil {
		t.Fatal(err)
	}
	release, err := s.Lock(img)
	if err != nil {
		t.Fatal(err)
	}
	if !s.inUse("aaaa") {
		t.Error("a held version is not in use")
	}
	if !s.lastUsed("aaaa").After(old) {
		t.Errorf("last used %v after a Lock; want later than %v", s.lastUsed("aaaa"), old)
	}
	// Two sandboxes may run on one image.
	release2, err := s.Lock(img)
	if err != nil {
		t.Fatal(err)
	}
	release2()
	if !s.inUse("aaaa") {
		t.Error("the first hold ended with the second")
	}
	deferred, err := s.Remove("a")
	if err != nil || !deferred {
		t.Fatalf("Remove = %v, %v; want deferred", deferred, err)
	}
	if _, err := os.Stat(img.Rootfs); err != nil {
		t.Fatalf("removed the files of an image in use: %v", err)
	}
	release()
	release() // twice is harmless
	if s.inUse("aaaa") {
		t.Error("a released version is still in use")
	}
	// The next change to the store removes the files.
	storeVersion(t, s, "b", "bbbb")
	if _, err := s.Remove("b"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"aaaa", "bbbb"} {
		if _, err := os.Stat(s.versionDir(v)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("version %s kept: %v", v, err)
		}
	}
	if _, err := s.Lock(img); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lock of a removed image = %v; want ErrNotFound", err)
	}
	if _, err := s.Lock(Image{Name: "x", Rootfs: "/elsewhere/rootfs"}); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Lock of an image outside the store = %v; want an error other than ErrNotFound", err)
	}
}

// TestRemoveShared: removing one of two names with the same content keeps
// the files for the other, and says the removal is done, not deferred.
func TestRemoveShared(t *testing.T) {
	s := New(Config{Dir: t.TempDir()})
	storeVersion(t, s, "a", "cccc")
	storeVersion(t, s, "b", "cccc")
	deferred, err := s.Remove("a")
	if err != nil || deferred {
		t.Fatalf("Remove = %v, %v; want done, not deferred", deferred, err)
	}
	if _, err := s.Resolve("a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed name resolves: %v", err)
	}
	img, err := s.Resolve("b")
	if err != nil {
		t.Fatalf("the other name: %v", err)
	}
	if _, err := os.Stat(img.Rootfs); err != nil {
		t.Errorf("shared files removed: %v", err)
	}
	if deferred, err := s.Remove("b"); err != nil || deferred {
		t.Fatalf("Remove of the last name = %v, %v; want done", deferred, err)
	}
	if _, err := os.Stat(s.versionDir("cccc")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("files of the last name kept: %v", err)
	}
}
