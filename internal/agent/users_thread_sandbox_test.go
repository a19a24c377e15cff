//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// requireRoot is testenv.RequireRoot, which this package's own tests
// cannot import (testenv imports the agent): it skips, or fails where a
// skip is not allowed (CORRAL_TEST_STRICT=1 or CI).
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CORRAL_TEST_STRICT") == "1" || os.Getenv("CI") != "" {
		t.Fatal("prerequisite missing: must run as root")
	}
	t.Skip("prerequisite missing: must run as root")
}

// TestAsUserThreads: both ways of switching a thread's credentials (fsuid,
// and the effective ids gVisor needs) make what the op creates the user's
// and refuse what the user may not do, and leave every thread root's
// afterwards.
func TestAsUserThreads(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o1777); err != nil {
		t.Fatal(err)
	}
	// t.TempDir's parent is 0700: make it passable for uid 1000.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	rootGroups, err := unix.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	// Groups the user namespace maps (runc's maps 0 and 1000 at least).
	user := identity{name: "user", uid: 1000, gid: 1000, groups: []int{1000, 0}, cred: true}
	for _, effective := range []bool{false, true} {
		for i := range 20 {
			f := filepath.Join(open, "f")
			_, err := asUserBy(user, effective, func() (struct{}, error) {
				return struct{}{}, os.WriteFile(f, nil, 0o644)
			})
			if err != nil {
				t.Fatalf("effective %v: create in a 1777 directory: %v", effective, err)
			}
			var st unix.Stat_t
			if err := unix.Stat(f, &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
				t.Errorf("effective %v: the file is %d:%d (%v), want 1000:1000", effective, st.Uid, st.Gid, err)
			}
			os.Remove(f)
			_, err = asUserBy(user, effective, func() (struct{}, error) {
				return struct{}{}, os.WriteFile(filepath.Join(dir, "x"), nil, 0o644)
			})
			if !errors.Is(err, syscall.EACCES) {
				t.Errorf("effective %v, %d: create in root's 0755 directory: %v, want EACCES", effective, i, err)
			}
		}
	}
	// Every thread the ops ran on went back: locked goroutines take
	// threads of the pool, and each finds root's credentials.
	var wg sync.WaitGroup
	bad := make(chan string, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			goruntime.LockOSThread()
			defer goruntime.UnlockOSThread()
			// No setfsuid (gVisor): the fsuid is the euid.
			fsuid, _, errno := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
			if errno == unix.ENOSYS {
				fsuid = uintptr(unix.Geteuid())
			}
			groups, _ := unix.Getgroups()
			if unix.Geteuid() != 0 || unix.Getegid() != 0 || fsuid != 0 || !slices.Equal(groups, rootGroups) {
				bad <- fmt.Sprintf("a thread is not root's: euid %d egid %d fsuid %d groups %v", unix.Geteuid(), unix.Getegid(), fsuid, groups)
			}
		}()
	}
	wg.Wait()
	close(bad)
	for s := range bad {
		t.Error(s)
		break
	}
}
