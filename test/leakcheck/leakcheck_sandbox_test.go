package leakcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime/cgroup"
	"github.com/corralhq/corral/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestNothingLeft: after the whole suite, no test left anything behind.
func TestNothingLeft(t *testing.T) {
	if os.Getenv("CORRAL_LEAKCHECK") != "1" {
		t.Skip("runs after the whole suite: make leakcheck (CORRAL_LEAKCHECK=1)")
	}
	// Dead sandbox inits are reparented to the host's init, which may reap
	// them a moment later; everything else must already be gone.
	var left []Leftover
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		left = Find()
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Error(l)
	}
}

// TestSweep: what a killed run leaves of a sandbox (a process in its
// cgroup, a disk mounted twice over, a loop device, a test directory) is
// found, and make sweep removes all of it. It runs after TestNothingLeft,
// whose check it would otherwise spoil.
func TestSweep(t *testing.T) {
	if os.Getenv("CORRAL_LEAKCHECK") != "1" {
		t.Skip("takes whatever a test left on the host: make leakcheck (CORRAL_LEAKCHECK=1)")
	}
	testenv.RequireRoot(t)
	sb := filepath.Join(t.TempDir(), "sandboxes", "runc", "sb-sweep")
	mnt := filepath.Join(sb, "disk")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	img := filepath.Join(sb, "disk.img")
	if err := os.WriteFile(img, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	bin, err := os.MkdirTemp("", "corral-test-sweep-")
	if err != nil {
		t.Fatal(err)
	}
	cg := "/" + testenv.CgroupParent + "/sb-sweep"
	sleep := exec.Command("sleep", "600")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = sleep.Wait(); close(exited) }()
	t.Cleanup(func() { _ = sleep.Process.Kill() })
	dirs := []string{filepath.Join(cgroup.Root, "pids", cg), filepath.Join(cgroup.Root, "memory", cg)}
	if cgroup.Unified() {
		dirs = []string{filepath.Join(cgroup.Root, cg)}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(sleep.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A cgroup's Detail names its hierarchies and when it was made.
	in := "in memory, pids, made "
	if cgroup.Unified() {
		in = "in cgroup2, made "
	}
	want := []Leftover{
		{Kind: Cgroup, Path: cg, Detail: in},
		{Kind: Process, Path: strconv.Itoa(sleep.Process.Pid), Detail: "sleep 600 "},
		{Kind: Mount, Path: mnt},
		{Kind: Loop, Path: loop, Detail: "backed by " + img},
		{Kind: Dir, Path: bin},
	}
	found := Find()
	for _, w := range want {
		if !slices.ContainsFunc(found, func(f Leftover) bool {
			if w.Kind == Cgroup {
				return f.Kind == w.Kind && f.Path == w.Path && strings.HasPrefix(f.Detail, w.Detail)
			}
			return f == w
		}) {
			t.Errorf("Find did not list %s; it listed %v", w, found)
		}
	}
	if _, err := Sweep(); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	if left := Find(); len(left) != 0 {
		t.Errorf("left after the sweep: %v", left)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the process in the cgroup still runs after the sweep")
	}
	for _, p := range []string{mnt, bin} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s still there after the sweep", p)
		}
	}
}
