// Package disk gives each sandbox a disk of its own: a sparse ext4 image on a
// loop device, so that disk_mb is a real file-system size and writing past it
// fails with ENOSPC inside the sandbox (a tmpfs would charge its pages to the
// memory limit instead). Images are copied from a formatted template, which
// costs a few hundred kilobytes of I/O instead of a mkfs per sandbox.
package disk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Layout of a disk: these directories exist at its root, owned by the
// sandbox user.
const (
	WorkspaceDir = "workspace"
	TmpDir       = "tmp"
)

// templateVersion changes when mkfs options change, so old templates are
// not reused.
const templateVersion = 2

// Templates makes and caches formatted empty images, one per size.
type Templates struct {
	dir      string
	uid, gid int

	mu    sync.Mutex
	ready map[int64]string
}

// NewTemplates keeps templates in dir; uid and gid own the layout
// directories.
func NewTemplates(dir string, uid, gid int) *Templates {
	return &Templates{dir: dir, uid: uid, gid: gid, ready: map[int64]string{}}
}

// path returns the template for size, formatting it on first use.
func (t *Templates) path(ctx context.Context, size int64) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.ready[size]; ok {
		return p, nil
	}
	p := filepath.Join(t.dir, fmt.Sprintf("ext4-v%d-%d-%d-%d.img", templateVersion, size, t.uid, t.gid))
	if _, err := os.Stat(p); err == nil {
		t.ready[size] = p
		return p, nil
	}
	if err := os.MkdirAll(t.dir, 0o700); err != nil {
		return "", fmt.Errorf("create template dir: %w", err)
	}
	staging, err := os.MkdirTemp(t.dir, "layout-")
	if err != nil {
		return "", fmt.Errorf("create template layout: %w", err)
	}
	defer os.RemoveAll(staging)
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{WorkspaceDir, 0o755}, {TmpDir, 0o1777}} {
		full := filepath.Join(staging, d.name)
		if err := os.Mkdir(full, d.mode); err != nil {
			return "", fmt.Errorf("create template layout: %w", err)
		}
		if err := os.Chmod(full, d.mode); err != nil { // umask
			return "", fmt.Errorf("create template layout: %w", err)
		}
		if err := os.Chown(full, t.uid, t.gid); err != nil {
			return "", fmt.Errorf("create template layout: %w", err)
		}
	}
	// Another runtime or process may be making the same template: each
	// works on its own file and the renames are atomic.
	f, err := os.CreateTemp(t.dir, filepath.Base(p)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	tmp := f.Name()
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("size template: %w", err)
	}
	// No journal: most disks live as long as their sandbox, and a journal
	// costs writes and space; a session's disk, which outlives its
	// sandboxes and a crash of the node, is checked (Check) before it is
	// attached again. One inode per 8 KiB so many small files fit; no
	// reserved blocks.
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-b", "4096", "-O", "^has_journal",
		"-E", "lazy_itable_init=1,root_owner=0:0", "-m", "0", "-i", "8192", "-d", staging, tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("mkfs.ext4: %w: %s", err, out)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("install template: %w", err)
	}
	t.ready[size] = p
	return p, nil
}

// Check repairs the file system of an image that is about to be attached
// again (a session's disk): a node that died with it mounted left it not
// clean, and ext4 without a journal must be checked before it is trusted.
// A clean file system is passed at once.
func Check(ctx context.Context, image string) error {
	out, err := exec.CommandContext(ctx, "e2fsck", "-p", image).CombinedOutput()
	var ee *exec.ExitError
	// Exit status 1: errors were corrected.
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("check %s: %w: %s", image, err, bytes.TrimSpace(out))
	}
	return nil
}

// Disk is a mounted sandbox disk.
type Disk struct {
	Image string // the image file
	Dir   string // where it is mounted on the host
	loop  string // the loop device's name under /sys/block: loop7
	// backing is the image as the kernel names it in the loop device's
	// backing_file: absolute, symbolic links resolved.
	backing string
}

// Create copies a template of size bytes to image and mounts it at dir.
func (t *Templates) Create(ctx context.Context, image, dir string, size int64) (*Disk, error) {
	tpl, err := t.path(ctx, size)
	if err != nil {
		return nil, err
	}
	if err := copySparse(tpl, image); err != nil {
		os.Remove(image)
		return nil, err
	}
	d, err := Attach(image, dir)
	if err != nil {
		os.Remove(image)
		return nil, err
	}
	return d, nil
}

// Attach mounts an existing image at dir.
func Attach(image, dir string) (*Disk, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create mount point: %w", err)
	}
	dev, err := attachLoop(image)
	if err != nil {
		return nil, err
	}
	// The loop device detaches itself (autoclear) once unmounted; until the
	// mount holds it, this fd does.
	defer dev.Close()
	err = unix.Mount(dev.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "")
	if err != nil {
		return nil, fmt.Errorf("mount %s on %s: %w", image, dir, err)
	}
	backing, err := filepath.Abs(image)
	if err == nil {
		backing, err = filepath.EvalSymlinks(backing)
	}
	if err != nil {
		backing = image
	}
	return &Disk{Image: image, Dir: dir, loop: filepath.Base(dev.Name()), backing: backing}, nil
}

// Rename moves the image of the mounted disk to image, on the same file
// system (the loop device follows the file), so that it can outlive its
// sandbox: Detach(false) then leaves it there.
func (d *Disk) Rename(image string) error {
	if _, err := os.Lstat(image); err == nil {
		return fmt.Errorf("move disk image: %s exists", image)
	}
	if err := os.Rename(d.Image, image); err != nil {
		return fmt.Errorf("move disk image: %w", err)
	}
	backing, err := filepath.Abs(image)
	if err == nil {
		backing, err = filepath.EvalSymlinks(backing)
	}
	if err != nil {
		backing = image
	}
	d.Image, d.backing = image, backing
	return nil
}

// Full reports whether the disk is out of inodes or as good as out of
// blocks. ext4 refuses writes while a little space still shows as available
// (its delayed-allocation reserve: 166 of 15,861 blocks on a 64 MB disk
// here), so "full" is less than 2 MiB or 0.5% left, whichever is larger.
func (d *Disk) Full() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		return false
	}
	slack := max(uint64(2<<20)/uint64(st.Bsize), st.Blocks/200)
	return st.Bavail < slack || st.Ffree == 0
}

// Usage returns what the disk holds and its size, in bytes, as its file
// system counts them (its own metadata included: a fresh disk is not
// empty).
func (d *Disk) Usage() (used, size int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		return 0, 0, fmt.Errorf("disk usage: %w", err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Blocks) * st.Bsize, nil
}

// The ioctls that freeze and thaw a mounted file system (linux/fs.h:
// _IOWR('X', 119, int) and _IOWR('X', 120, int)).
const (
	fiFreeze = 0xc0045877
	fiThaw   = 0xc0045878
)

// CopyFrozen copies the mounted disk's image to dst (which must not
// exist), sparse, while its file system is frozen: the kernel writes out
// what it holds and makes every writer wait until the copy is done, so
// the copy is a clean file system, as an unmount would leave it, while
// the sandbox's programs run on (stalled for the copy if they write).
func (d *Disk) CopyFrozen(dst string) (err error) {
	f, err := os.Open(d.Dir)
	if err != nil {
		return fmt.Errorf("freeze disk: %w", err)
	}
	defer f.Close()
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fiFreeze, 0); e != 0 {
		return fmt.Errorf("freeze disk %s: %w", d.Dir, e)
	}
	defer func() {
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fiThaw, 0); e != 0 && err == nil {
			err = fmt.Errorf("thaw disk %s: %w", d.Dir, e)
		}
	}()
	if err := copySparse(d.Image, dst); err != nil {
		os.Remove(dst)
		return fmt.Errorf("copy disk: %w", err)
	}
	return nil
}

// Detach unmounts the disk, waits for its loop device to let go of the
// image and, if remove, deletes the image.
func (d *Disk) Detach(remove bool) error {
	if err := Unmount(d.Dir); err != nil {
		return err
	}
	if err := d.awaitLoopGone(); err != nil {
		return err
	}
	if remove {
		if err := os.Remove(d.Image); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove disk image: %w", err)
		}
	}
	return nil
}

// loopGrace bounds the wait for a loop device to detach after the unmount.
const loopGrace = 5 * time.Second

// awaitLoopGone waits until d's loop device no longer backs d's image. The
// unmount drops this mount only: a sandbox's mount namespace that is still
// being torn down holds the file system, and so the loop device, a little
// longer. Autoclear detaches the device once the last holder goes; until
// then a loop device is used up and the image is pinned.
func (d *Disk) awaitLoopGone() error {
	if d.loop == "" {
		return nil
	}
	backing := filepath.Join("/sys/block", d.loop, "loop", "backing_file")
	deadline := time.Now().Add(loopGrace)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		b, err := os.ReadFile(backing)
		if err != nil || strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") != d.backing {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("loop device %s still backs %s %v after the unmount", d.loop, d.Image, loopGrace)
		}
		time.Sleep(pause)
	}
}

// Unmount unmounts dir, retrying while it is busy and detaching lazily as a
// last resort. A dir that is not mounted is not an error.
func Unmount(dir string) error {
	var err error
	for i := 0; i < 20; i++ {
		err = unix.Unmount(dir, 0)
		if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
	}
	if err2 := unix.Unmount(dir, unix.MNT_DETACH); err2 == nil {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", dir, err)
}

// attachLoop binds image to a free loop device.
func attachLoop(image string) (*os.File, error) {
	f, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open disk image: %w", err)
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop control: %w", err)
	}
	defer ctl.Close()
	for attempt := 0; attempt < 64; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find free loop device: %w", err)
		}
		name := "/dev/loop" + strconv.Itoa(n)
		dev, err := os.OpenFile(name, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			// No devtmpfs: make the node ourselves.
			if err := unix.Mknod(name, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("create %s: %w", name, err)
			}
			dev, err = os.OpenFile(name, os.O_RDWR, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure %s: %w", name, err)
		}
		// Another process took it between GET_FREE and CONFIGURE.
	}
	return nil, errors.New("no free loop device")
}

// CopyImage copies the image of a disk that is not mounted (or a copy
// made by CopyFrozen) to dst, which must not exist, keeping its holes.
func CopyImage(src, dst string) error {
	if err := copySparse(src, dst); err != nil {
		os.Remove(dst)
		return err
	}
	return nil
}

// copySparse copies src to dst, writing only src's data extents.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open template: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("stat template: %w", err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("create disk image: %w", err)
	}
	defer out.Close()
	size := st.Size()
	var off int64
	for off < size {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if err != nil {
			if errors.Is(err, unix.ENXIO) {
				break // only a hole remains
			}
			return fmt.Errorf("seek template: %w", err)
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek template: %w", err)
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return fmt.Errorf("seek template: %w", err)
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return fmt.Errorf("seek disk image: %w", err)
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return fmt.Errorf("copy template: %w", err)
		}
		off = hole
	}
	if err := out.Truncate(size); err != nil {
		return fmt.Errorf("size disk image: %w", err)
	}
	return out.Close()
}
