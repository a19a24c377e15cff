//go:build linux

package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The agent places, reads, lists and removes files for the host as the
// sandbox's user, in the sandbox's own view of the file system: a link a
// program planted resolves where the program could have gone anyway, never
// to the host.

// writableRoots are where the host may place files.
var writableRoots = []string{"/workspace", "/tmp"}

func checkPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return refuse(KindInvalid, "path %q is not absolute and clean", p)
	}
	for _, root := range writableRoots {
		if strings.HasPrefix(p, root+"/") {
			return nil
		}
	}
	return refuse(KindInvalid, "path %q is outside %v", p, writableRoots)
}

// upload is a file the host is sending: written to a hidden file beside
// its path and renamed into place once whole, so that a failed or
// abandoned upload leaves nothing (a disk filled by half a file, or a
// file cut short that looks whole) and a reader never sees half of it.
type upload struct {
	f          *os.File
	tmp, path  string
	sandboxDst string // the path as the sandbox names it, for errors
}

// discardUpload is the payload of a msgFileEnd that abandons the upload.
const discardUpload = "discard"

func (a *Agent) createFile(h fileHeader) (*upload, error) {
	if err := checkPath(h.Path); err != nil {
		return nil, err
	}
	path := a.hostPath(h.Path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(h.Path), err)
	}
	// What the path is now decides before any byte comes: a link is not
	// written through, a directory not replaced, a name too long refused.
	switch st, err := os.Lstat(path); {
	case err == nil && st.Mode()&os.ModeSymlink != 0:
		return nil, refuse(KindSymlink, "create %s: a symbolic link, not written through", h.Path)
	case err == nil && st.IsDir():
		return nil, fmt.Errorf("create %s: %w", h.Path, syscall.EISDIR)
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	mode := os.FileMode(h.Mode & 0o777)
	if mode == 0 {
		mode = 0o644
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(filepath.Dir(path), ".corral-upload-"+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	// The umask may have taken bits of mode away.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	return &upload{f: f, tmp: tmp, path: path, sandboxDst: h.Path}, nil
}

// write adds p to the upload; on error the upload is gone.
func (u *upload) write(p []byte) error {
	if _, err := u.f.Write(p); err != nil {
		u.discard()
		return fmt.Errorf("write %s: %w", u.sandboxDst, err)
	}
	return nil
}

// place closes the upload and renames it into place; on error it is gone.
func (u *upload) place() error {
	if err := u.f.Close(); err != nil {
		os.Remove(u.tmp)
		return fmt.Errorf("close %s: %w", u.sandboxDst, err)
	}
	if err := os.Rename(u.tmp, u.path); err != nil {
		os.Remove(u.tmp)
		return fmt.Errorf("place %s: %w", u.sandboxDst, err)
	}
	return nil
}

// discard drops the upload.
func (u *upload) discard() {
	u.f.Close()
	os.Remove(u.tmp)
}

// readFile streams a regular file to the host.
func (a *Agent) readFile(id uint32, p string) {
	f, err := os.OpenFile(a.hostPath(p), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		a.fail(id, fmt.Errorf("open: %w", err))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		a.fail(id, fmt.Errorf("stat: %w", err))
		return
	}
	if !st.Mode().IsRegular() {
		a.fail(id, refuse(KindNotRegular, "%s is not a regular file", p))
		return
	}
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

// list lists a directory, at most MaxListEntries of it. Anything else is
// ENOTDIR at once: opening a FIFO a program made without O_NONBLOCK would
// wait for a writer, and stall every frame behind this one.
func (a *Agent) list(dir string) ([]Entry, error) {
	d, err := os.OpenFile(a.hostPath(dir), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer d.Close()
	infos, err := d.Readdir(MaxListEntries)
	if err != nil && err != io.EOF {
		return nil, fmt.Errorf("list: %w", err)
	}
	out := make([]Entry, 0, len(infos))
	for _, fi := range infos {
		e := Entry{Name: fi.Name(), Path: dir + "/" + fi.Name(), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime().UTC(), Type: "other"}
		switch {
		case fi.IsDir():
			e.Type, e.Dir = "dir", true
		case fi.Mode()&os.ModeSymlink != 0:
			e.Type = "symlink"
			e.SymlinkTarget, _ = os.Readlink(a.hostPath(e.Path))
		case fi.Mode().IsRegular():
			e.Type = "file"
		}
		out = append(out, e)
	}
	return out, nil
}

// remove removes a file or directory tree.
func (a *Agent) remove(p string) error {
	if err := os.RemoveAll(a.hostPath(p)); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	return nil
}
