package disk_test

// The test is outside the package so that it can use testenv, which
// imports disk through the runtimes it builds.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/runtime/disk"
	"github.com/corralhq/corral/internal/testenv"
)

// backs reports whether some loop device backs image (absolute, links
// resolved: as the kernel names it).
func backs(image string) bool {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
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
	backing, err := filepath.EvalSymlinks(d.Image)
	if err == nil {
		backing, err = filepath.Abs(backing)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Without this, the check after Detach could not fail.
	if !backs(backing) {
		t.Fatalf("no loop device backs %s after Create", backing)
	}
	hold := filepath.Join(root, "hold")
	if err := os.Mkdir(hold, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(d.Dir, hold, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Time, 1)
	holderDone := make(chan struct{})
	// The holder outlives no failure of the test (t.Error after the test
	// ends would panic).
	defer func() { <-holderDone }()
	go func() {
		defer close(holderDone)
		// The hold is what is under test: Detach must still be waiting
		// when it ends.
		time.Sleep(300 * time.Millisecond)
		released <- time.Now()
		if err := unix.Unmount(hold, 0); err != nil {
			t.Error(err)
		}
	}()
	if err := d.Detach(true); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	if at := <-released; returned.Before(at) {
		t.Errorf("Detach returned %v before the file system's last mount went", at.Sub(returned))
	}
	if backs(backing) {
		t.Errorf("a loop device still backs %s after Detach", d.Image)
	}
	if _, err := os.Stat(d.Image); !os.IsNotExist(err) {
		t.Errorf("image still there after Detach(true): %v", err)
	}
}
