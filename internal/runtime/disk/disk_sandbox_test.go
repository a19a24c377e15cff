package disk_test

// The test is outside the package so that it can use testenv, which
// imports disk through the runtimes it builds.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/runtime/disk"
	"github.com/corralhq/corral/internal/testenv"
)

// backs reports whether some loop device backs image (absolute, links
// resolved, as the kernel names it).
func backs(image string) bool {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, _ := os.ReadFile(f) // a device detached since the glob backs nothing
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
			return true
		}
	}
	return false
}

// mounted reports whether dir is a mount point of this process's
// namespace.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// TestDetachWaitsForTheLoopDevice holds the disk's file system through a
// second mount, as a sandbox's dying mount namespace does: Detach must not
// return while the loop device still backs the image, and must return once
// the last holder goes.
func TestDetachWaitsForTheLoopDevice(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	tpl := disk.NewTemplates(filepath.Join(root, "templates"), 1000, 1000)
	d, err := tpl.Create(t.Context(), filepath.Join(root, "disk.img"), filepath.Join(root, "disk"), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	image, err := filepath.EvalSymlinks(d.Image)
	if err != nil {
		t.Fatal(err)
	}
	hold := filepath.Join(root, "hold")
	if err := os.Mkdir(hold, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(d.Dir, hold, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	detached := make(chan error, 1)
	go func() { detached <- d.Detach(true) }()
	// Detach unmounts its own mount first, then waits for the device:
	// only once that unmount is seen is the wait what is under test.
	for deadline := time.Now().Add(10 * time.Second); mounted(t, d.Dir); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Detach did not unmount %s within 10 s", d.Dir)
		}
	}
	if !backs(image) {
		t.Fatalf("no loop device backs %s while %s holds its file system", image, hold)
	}
	// Not a synchronisation: the time in which Detach must not return.
	select {
	case err := <-detached:
		t.Fatalf("Detach returned (%v) while a mount still held the file system", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := unix.Unmount(hold, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-detached:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Detach still waiting 10 s after the last holder went")
	}
	if backs(image) {
		t.Errorf("a loop device still backs %s after Detach", image)
	}
	if _, err := os.Stat(d.Image); !os.IsNotExist(err) {
		t.Errorf("image still there after Detach(true): %v", err)
	}
}

// TestCheckRepairs: a session's disk left mounted by a node that died is
// not clean; Check repairs it before it is attached again, and passes a
// clean one.
func TestCheckRepairs(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	tpl := disk.NewTemplates(filepath.Join(root, "templates"), 1000, 1000)
	d, err := tpl.Create(t.Context(), filepath.Join(root, "disk.img"), filepath.Join(root, "disk"), 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Detach(true)
	if err := os.WriteFile(filepath.Join(d.Dir, "kept"), []byte("turn 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	unix.Sync()
	// The image as a node killed with it mounted leaves it: a file system
	// without a journal is marked not clean while mounted.
	crashed := filepath.Join(root, "crashed.img")
	if out, err := exec.Command("cp", "--sparse=always", d.Image, crashed).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v %s", err, out)
	}
	if !strings.Contains(state(t, crashed), "not clean") {
		t.Fatalf("the copy of a mounted disk is %q, want not clean", state(t, crashed))
	}
	if err := disk.Check(t.Context(), crashed); err != nil {
		t.Fatalf("check of a file system left not clean: %v", err)
	}
	if got := state(t, crashed); got != "clean" {
		t.Errorf("after Check the file system is %q", got)
	}
	if err := disk.Check(t.Context(), crashed); err != nil {
		t.Errorf("check of a clean file system: %v", err)
	}
	again, err := disk.Attach(crashed, filepath.Join(root, "again"))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Detach(false)
	if b, err := os.ReadFile(filepath.Join(again.Dir, "kept")); err != nil || string(b) != "turn 1" {
		t.Errorf("the file after Check: %q, %v", b, err)
	}
}

// state is what dumpe2fs says of an image's file system state.
func state(t *testing.T, image string) string {
	t.Helper()
	out, err := exec.Command("dumpe2fs", "-h", image).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "Filesystem state:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("dumpe2fs says no state:\n%s", out)
	return ""
}
