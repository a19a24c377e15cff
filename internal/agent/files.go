//go:build linux

package agent

import (
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

func (a *Agent) createFile(h fileHeader) (*os.File, error) {
	if err := checkPath(h.Path); err != nil {
		return nil, err
	}
	path := a.hostPath(h.Path)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(h.Path), err)
	}
	mode := os.FileMode(h.Mode & 0o777)
	if mode == 0 {
		mode = 0o644
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if errors.Is(err, syscall.ELOOP) {
		return nil, refuse(KindSymlink, "create %s: a symbolic link, not written through", h.Path)
	}
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	return f, nil
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
