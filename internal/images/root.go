package images

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// root confines file operations to a directory tree: every path is resolved
// as if the tree were "/" (openat2 RESOLVE_IN_ROOT), so no symbolic link or
// ".." inside it reaches the host's files, and the last component is never
// followed when something is created or removed. Paths are slash-separated
// and relative to the tree. A root is not safe for concurrent use.
type root struct {
	path string
	fd   int
}

func openRoot(dir string) (*root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &root{path: dir, fd: fd}, nil
}

func (r *root) Close() error { return unix.Close(r.fd) }

const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// resolve opens p inside the root with flags (O_CLOEXEC is added).
func (r *root) resolve(p string, flags int) (int, error) {
	if p == "" {
		p = "."
	}
	for {
		fd, err := unix.Openat2(r.fd, p, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveFlags})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// openDir returns a directory fd for p, creating missing directories (0755,
// owned by root) when create is set.
func (r *root) openDir(p string, create bool) (int, error) {
	fd, err := r.resolve(p, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil || !create || err != unix.ENOENT || p == "" || p == "." {
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: p, Err: err}
		}
		return fd, nil
	}
	parent, err := r.openDir(path.Dir(p), true)
	if err != nil {
		return -1, err
	}
	err = unix.Mkdirat(parent, path.Base(p), 0o755)
	unix.Close(parent)
	if err != nil && err != unix.EEXIST {
		return -1, &os.PathError{Op: "mkdir", Path: p, Err: err}
	}
	fd, err = r.resolve(p, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

// parent returns the (created) parent directory of p and p's base name.
func (r *root) parent(p string) (int, string, error) {
	fd, err := r.openDir(path.Dir(p), true)
	return fd, path.Base(p), err
}

// clearAt removes whatever is at base in dirfd unless it is a directory and
// keepDir is set; it reports whether a directory remains.
func clearAt(dirfd int, base string, keepDir bool) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if keepDir {
			return true, nil
		}
		return false, removeAllAt(dirfd, base)
	}
	return false, unix.Unlinkat(dirfd, base, 0)
}

// removeAllAt removes name in dirfd and, for a directory, everything in
// it, never following a symbolic link.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(fd, n); err != nil {
				break
			}
		}
	}
	f.Close()
	if err != nil {
		return err
	}
	err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	if err == unix.ENOENT {
		return nil
	}
	return err
}

// Mkdir makes p a directory with mode and owner, replacing anything else
// there; an existing directory keeps its contents.
func (r *root) Mkdir(p string, mode uint32, uid, gid int) error {
	if p == "" || p == "." {
		return r.chmodOwn(r.fd, "", mode, uid, gid)
	}
	pfd, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	isDir, err := clearAt(pfd, base, true)
	if err != nil {
		return &os.PathError{Op: "replace", Path: p, Err: err}
	}
	if !isDir {
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return &os.PathError{Op: "mkdir", Path: p, Err: err}
		}
	}
	return r.chmodOwn(pfd, base, mode, uid, gid)
}

func (r *root) chmodOwn(dirfd int, base string, mode uint32, uid, gid int) error {
	flags := 0
	if base == "" {
		flags = unix.AT_EMPTY_PATH
	}
	if err := unix.Fchownat(dirfd, base, uid, gid, flags|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "chown", Path: base, Err: err}
	}
	if base == "" {
		// fchmodat has no AT_EMPTY_PATH; the root is a real directory.
		if err := unix.Chmod(r.path, mode); err != nil {
			return &os.PathError{Op: "chmod", Path: r.path, Err: err}
		}
		return nil
	}
	if err := unix.Fchmodat(dirfd, base, mode, 0); err != nil {
		return &os.PathError{Op: "chmod", Path: base, Err: err}
	}
	return nil
}

// Create makes p a new, empty regular file open for writing (mode 0600
// until the caller sets it), replacing anything there.
func (r *root) Create(p string) (*os.File, error) {
	pfd, base, err := r.parent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	if _, err := clearAt(pfd, base, false); err != nil {
		return nil, &os.PathError{Op: "replace", Path: p, Err: err}
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// WriteFile replaces p with a regular file holding data.
func (r *root) WriteFile(p string, data []byte, mode uint32, uid, gid int) error {
	f, err := r.Create(p)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Chmod(os.FileMode(mode))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Symlink makes p a symbolic link to target, replacing anything there.
func (r *root) Symlink(target, p string, uid, gid int) error {
	pfd, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if _, err := clearAt(pfd, base, false); err != nil {
		return &os.PathError{Op: "replace", Path: p, Err: err}
	}
	if err := unix.Symlinkat(target, pfd, base); err != nil {
		return &os.PathError{Op: "symlink", Path: p, Err: err}
	}
	if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "chown", Path: p, Err: err}
	}
	return nil
}

// Link makes p a hard link to the existing non-directory old.
func (r *root) Link(old, p string) error {
	ofd, obase, err := r.parent(old)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	var st unix.Stat_t
	if err := unix.Fstatat(ofd, obase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "link", Path: old, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return &os.PathError{Op: "link", Path: old, Err: unix.EISDIR}
	}
	pfd, base, err := r.parent(p)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if _, err := clearAt(pfd, base, false); err != nil {
		return &os.PathError{Op: "replace", Path: p, Err: err}
	}
	if err := unix.Linkat(ofd, obase, pfd, base, 0); err != nil {
		return &os.PathError{Op: "link", Path: p, Err: err}
	}
	return nil
}

// RemoveAll removes p and everything under it; a missing p is no error.
func (r *root) RemoveAll(p string) error {
	pfd, err := r.openDir(path.Dir(p), false)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := removeAllAt(pfd, path.Base(p)); err != nil {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}

// ReadDir lists the names in directory p; a missing directory is empty.
func (r *root) ReadDir(p string) ([]os.DirEntry, error) {
	fd, err := r.resolve(p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err == unix.ENOENT || err == unix.ENOTDIR {
		return nil, nil
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return f.ReadDir(-1)
}

// ReadFile reads p, following links only inside the root.
func (r *root) ReadFile(p string, limit int64) ([]byte, error) {
	fd, err := r.resolve(p, unix.O_RDONLY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > limit {
		return nil, &os.PathError{Op: "read", Path: p, Err: fmt.Errorf("not a regular file of at most %d bytes", limit)}
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && n < len(b) {
		return nil, err
	}
	return b[:n], nil
}

// Lstat describes p without following its last component.
func (r *root) Lstat(p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	pfd, err := r.openDir(path.Dir(p), false)
	if err != nil {
		return st, err
	}
	defer unix.Close(pfd)
	if err := unix.Fstatat(pfd, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	return st, nil
}

// cleanEntry checks a path from an archive: relative, no ".." component,
// nothing but a file name in each component. It returns the path cleaned,
// "" for the root itself.
func cleanEntry(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty path")
	}
	if strings.HasPrefix(name, "/") {
		return "", errors.New("absolute path")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("NUL in path")
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", errors.New("\"..\" in path")
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}

// checkLinkTarget refuses a symbolic link at p whose relative target climbs
// above the root. Absolute targets are resolved against the image's root
// inside a sandbox (and by root here), so they cannot escape.
func checkLinkTarget(p, target string) error {
	if target == "" {
		return errors.New("empty link target")
	}
	if strings.IndexByte(target, 0) >= 0 {
		return errors.New("NUL in link target")
	}
	if strings.HasPrefix(target, "/") {
		return nil
	}
	// Climbing is checked component by component: "a/../../x" escapes even
	// though it cleans to something short.
	depth := strings.Count(path.Dir(p), "/") + 1
	if path.Dir(p) == "." {
		depth = 0
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return fmt.Errorf("link target %q escapes the image root", target)
			}
		default:
			depth++
		}
	}
	return nil
}
