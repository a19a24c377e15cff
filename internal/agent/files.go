//go:build linux

package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// The agent places, reads, lists and removes files for the host as the
// sandbox's user, in the sandbox's own view of the file system, and never
// through a symbolic link: every path is walked from its writable root one
// component at a time (fileops.go), and the last component is acted on by
// name in the directory reached. A link on the way is refused wherever it
// points; a link at the end is removed as itself, and refused for a read,
// a write or a listing. Reads too: the agent is not the program. It is the
// sandbox's PID 1 and may read what the program may not (its own /proc/1,
// non-dumpable), so a link a program planted could lead a read there.

// writableRoots are where the host may place files, unless the agent is a
// system sandbox's: then it may place them anywhere but in systemPlaces.
var writableRoots = []string{"/workspace", "/tmp"}

// localRoots are writableRoots in local mode, whose root stands for a
// system sandbox's too (the fake runtime's): its user's home is one more.
var localRoots = []string{"/workspace", "/tmp", "/home/user"}

// systemPlaces are the kernel's and Corral's own places in a system
// sandbox, where no file operation goes.
var systemPlaces = []string{"/proc", "/sys", "/dev", "/.corral"}

// checkPath refuses a path the host may not place a file at.
func (a *Agent) checkPath(p string) error {
	_, _, err := a.confine(p, false)
	return err
}

// upload is a file the host is sending: written to a hidden file beside
// its path and renamed into place once whole, so that a failed or
// abandoned upload leaves nothing (a disk filled by half a file, or a
// file cut short that looks whole) and a reader never sees half of it.
type upload struct {
	f *os.File
	// user does the upload.
	user identity
	// dir is the directory it is placed in, open with O_PATH: the hidden
	// file is made, renamed and removed there by name, so that no link
	// put in the way meanwhile is gone through.
	dir       int
	tmp, name string
	// sandboxDst is the path as the sandbox names it, for errors.
	sandboxDst string
}

// discardUpload is the payload of a msgFileEnd that abandons the upload.
const discardUpload = "discard"

// createFile begins the upload h names, making the directories on its way
// (mode 0755).
func (a *Agent) createFile(h fileHeader) (*upload, error) {
	root, comps, err := a.confine(h.Path, false)
	if err != nil {
		return nil, err
	}
	user, err := a.resolveUser(h.User)
	if err != nil {
		return nil, err
	}
	return asUser(user, func() (*upload, error) {
		dir, err := a.walkMaking(root, comps[:len(comps)-1])
		if err != nil {
			return nil, err
		}
		u, err := startUpload(dir, comps[len(comps)-1], h)
		if err != nil {
			unix.Close(dir)
			return nil, err
		}
		u.user = user
		return u, nil
	})
}

// startUpload makes the hidden file of the upload of name in dir.
func startUpload(dir int, name string, h fileHeader) (*upload, error) {
	// What the path is now decides before any byte comes: a link is not
	// written through, a directory not replaced, a name too long refused.
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return nil, refuse(KindSymlink, "create %s: a symbolic link, not written through", h.Path)
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return nil, fmt.Errorf("create %s: %w", h.Path, syscall.EISDIR)
	case err != nil && !errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	mode := h.Mode & 0o777
	if mode == 0 {
		mode = 0o644
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".corral-upload-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	// The umask may have taken bits of mode away.
	if err := unix.Fchmod(fd, mode); err != nil {
		unix.Close(fd)
		unix.Unlinkat(dir, tmp, 0)
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	return &upload{f: os.NewFile(uintptr(fd), h.Path), dir: dir, tmp: tmp, name: name, sandboxDst: h.Path}, nil
}

// write adds p to the upload; on error the upload is gone.
func (u *upload) write(p []byte) error {
	if _, err := u.f.Write(p); err != nil {
		u.discard()
		return fmt.Errorf("write %s: %w", u.sandboxDst, err)
	}
	return nil
}

// place closes the upload and renames it into place (a link there now is
// replaced, as rename(2) replaces it, not gone through); on error it is
// gone.
func (u *upload) place() error {
	defer unix.Close(u.dir)
	if err := u.f.Close(); err != nil {
		u.unlink()
		return fmt.Errorf("close %s: %w", u.sandboxDst, err)
	}
	err := asUserDo(u.user, func() error { return unix.Renameat(u.dir, u.tmp, u.dir, u.name) })
	if err != nil {
		u.unlink()
		return fmt.Errorf("place %s: %w", u.sandboxDst, err)
	}
	return nil
}

// discard drops the upload.
func (u *upload) discard() {
	u.f.Close()
	u.unlink()
	unix.Close(u.dir)
}

// unlink removes the hidden file, as its user.
func (u *upload) unlink() {
	_ = asUserDo(u.user, func() error { return unix.Unlinkat(u.dir, u.tmp, 0) })
}

// openFile opens the regular file at p for reading; a link there is
// KindSymlink, anything else that is not a regular file KindNotRegular.
func (a *Agent) openFile(p string, user identity) (*os.File, error) {
	return asUser(user, func() (*os.File, error) { return a.openFileAs(p) })
}

// openFileAs is openFile with the thread's credentials.
func (a *Agent) openFileAs(p string) (*os.File, error) {
	dir, name, err := a.openParent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	// Without O_DIRECTORY, gVisor honours O_NOFOLLOW as Linux does (see
	// stepDir). O_NONBLOCK: a FIFO must not wait for a writer.
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		var st unix.Stat_t
		if errors.Is(err, unix.ELOOP) && unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, refuse(KindSymlink, "%s is a symbolic link, not read through", p)
		}
		return nil, fmt.Errorf("open %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, refuse(KindNotRegular, "%s is not a regular file", p)
	}
	return f, nil
}

// readFile streams a regular file to the host.
func (a *Agent) readFile(id uint32, p string, user identity) {
	f, err := a.openFile(p, user)
	if err != nil {
		a.fail(id, err)
		return
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if serr := a.send(msgFileData, id, buf[:n]); serr != nil {
				return
			}
		}
		if err == io.EOF {
			a.send(msgOK, id, nil)
			return
		}
		if err != nil {
			a.fail(id, fmt.Errorf("read: %w", err))
			return
		}
	}
}

// remove removes the file, link or directory tree at p as user; nothing
// there is no error.
func (a *Agent) remove(p string, user identity) error {
	return asUserDo(user, func() error { return a.removeAs(p) })
}

func (a *Agent) removeAs(p string) error {
	dir, name, err := a.openParent(p)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	return removeAt(dir, name, p)
}

// removeBatch is how many names of a directory removeAt reads at once.
const removeBatch = 1024

// removeAt removes name in the directory dir (p is its path): a link as
// itself, a directory with what is in it, each entry by name in a
// directory opened without following a link. What went meanwhile is no
// error.
func removeAt(dir int, name, p string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dir, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		return nil
	}
	// A directory: removed at once when empty (even one its user may not
	// read); else emptied a batch of names at a time (each batch read
	// again from its start, as removing shifts what is left), then
	// removed. Each batch removes every name it read or fails, so this
	// ends.
	switch err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); {
	case err == nil || errors.Is(err, unix.ENOENT):
		return nil
	case !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST):
		return fmt.Errorf("remove %s: %w", p, err)
	}
	for {
		fd, err := stepDir(dir, name, p, unix.O_RDONLY)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		names, err := readNames(fd, removeBatch)
		if err != nil {
			err = fmt.Errorf("remove %s: %w", p, err)
		}
		for _, n := range names {
			if err == nil {
				err = removeAt(fd, n, p+"/"+n)
			}
		}
		unix.Close(fd)
		if err != nil {
			return err
		}
		if len(names) < removeBatch {
			break
		}
	}
	if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}
