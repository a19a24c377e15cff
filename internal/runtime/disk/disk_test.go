package disk

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// backs reports whether some loop device backs image.
func backs(t *testing.T, image string) bool {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), image) {
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
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices and mounts")
	}
	root := t.TempDir()
	tpl := NewTemplates(filepath.Join(root, "templates"), 1000, 1000)
	d, err := tpl.Create(t.Context(), filepath.Join(root, "disk.img"), filepath.Join(root, "disk"), 16<<20)
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
	released := make(chan time.Time, 1)
	go func() {
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
	if backs(t, d.backing) {
		t.Errorf("a loop device still backs %s after Detach", d.Image)
	}
	if _, err := os.Stat(d.Image); !os.IsNotExist(err) {
		t.Errorf("image still there after Detach(true): %v", err)
	}
}
