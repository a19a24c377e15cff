//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Every file operation (stat, listings, mkdir, move, the directories a
// watch follows, and the uploads, reads and removes of files.go) reaches a
// path one component at a time from its root, /workspace or /tmp, opening
// each directory from the one before with O_NOFOLLOW. A symbolic link on
// the way is refused (KindSymlink) wherever it points, and the last
// component is never followed: a link there is described, moved, removed
// or refused, never gone through. That is the rule the host applies to
// artifacts (openat2 with RESOLVE_NO_SYMLINKS), made of system calls that
// gVisor and every kernel have (every step is an O_PATH open: see
// stepDir), where openat2 would do only the opens: a removal, a rename and
// a mkdir still act by name in a directory held open. As for every file
// operation, the agent acts as the sandbox's user (the one the request
// names in a system sandbox: asUser, users.go).

// confine splits p, an absolute and clean path, into the root it lies
// under (one of writableRoots or, for a system sandbox's agent, "/") and
// its components below that root. rootOK admits the root itself (no
// components).
func (a *Agent) confine(p string, rootOK bool) (string, []string, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
		return "", nil, refuse(KindInvalid, "path %q is not absolute and clean", p)
	}
	if len(p) >= unix.PathMax {
		// What the kernel answers for a path this long, though the walk
		// never hands it the whole path.
		return "", nil, fmt.Errorf("path of %d bytes: %w", len(p), unix.ENAMETOOLONG)
	}
	if a.users {
		if a.systemPlace(p) {
			return "", nil, refuse(KindInvalid, "path %q is in the system's %v", p, systemPlaces)
		}
		switch {
		case p != "/":
			return "/", strings.Split(p[1:], "/"), nil
		case rootOK:
			return "/", nil, nil
		}
		return "", nil, refuse(KindInvalid, "path %q is the root directory", p)
	}
	roots := writableRoots
	if a.local {
		roots = localRoots
	}
	for _, root := range roots {
		if p == root && rootOK {
			return root, nil, nil
		}
		if rest, ok := strings.CutPrefix(p, root+"/"); ok {
			return root, strings.Split(rest, "/"), nil
		}
	}
	return "", nil, refuse(KindInvalid, "path %q is outside %v", p, roots)
}

// systemPlace reports whether p is, or is under, one of systemPlaces, for
// a system sandbox's agent: no request names it, and a listing or watch of
// a directory above does not go into it.
func (a *Agent) systemPlace(p string) bool {
	if !a.users {
		return false
	}
	for _, sp := range systemPlaces {
		if p == sp || strings.HasPrefix(p, sp+"/") {
			return true
		}
	}
	return false
}

// dirFlags open a directory and nothing else: with O_DIRECTORY a FIFO is
// ENOTDIR before any wait for a writer.
const dirFlags = unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK

// stepDir opens the directory name in the directory dir with flags
// (unix.O_PATH to pass through it, unix.O_RDONLY to read it); p names it in
// errors. A symbolic link is KindSymlink.
//
// The step itself is always O_PATH: gVisor follows a link named by
// O_RDONLY|O_DIRECTORY|O_NOFOLLOW (Linux does not), but not one named with
// O_PATH. A directory to read is then opened again as "." from there.
func stepDir(dir int, name, p string, flags int) (int, error) {
	fd, err := unix.Openat(dir, name, unix.O_PATH|dirFlags, 0)
	if err != nil {
		// O_NOFOLLOW|O_DIRECTORY on a link is ENOTDIR or ELOOP,
		// depending on the kernel.
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			var st unix.Stat_t
			if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return -1, refuse(KindSymlink, "%s is a symbolic link, not followed", p)
			}
		}
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	if flags == unix.O_PATH {
		return fd, nil
	}
	rd, err := unix.Openat(fd, ".", flags|dirFlags, 0)
	unix.Close(fd)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", p, err)
	}
	return rd, nil
}

// walkDir opens the directory at the sandbox path made of root (one of
// writableRoots) and comps with flags (see stepDir), passing through every
// directory on the way with O_PATH.
func (a *Agent) walkDir(root string, comps []string, flags int) (int, error) {
	first := flags
	if len(comps) > 0 {
		first = unix.O_PATH
	}
	fd, err := unix.Open(a.hostPath(root), first|dirFlags, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s: %w", root, err)
	}
	p := strings.TrimSuffix(root, "/")
	for i, c := range comps {
		p += "/" + c
		step := unix.O_PATH
		if i == len(comps)-1 {
			step = flags
		}
		next, err := stepDir(fd, c, p, step)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// walkMaking is walkDir with flags O_PATH, making the directories on the
// way that are missing (mode 0755); a link on the way is KindSymlink, as a
// step of walkDir.
func (a *Agent) walkMaking(root string, comps []string) (int, error) {
	fd, err := a.walkDir(root, nil, unix.O_PATH)
	if err != nil {
		return -1, err
	}
	p := strings.TrimSuffix(root, "/")
	for _, c := range comps {
		p += "/" + c
		next, err := stepDir(fd, c, p, unix.O_PATH)
		if errors.Is(err, unix.ENOENT) {
			// Made here, or meanwhile by a program: either is the
			// directory to go on from.
			if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, fmt.Errorf("mkdir %s: %w", p, err)
			}
			next, err = stepDir(fd, c, p, unix.O_PATH)
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// openParent opens the directory holding p (under a writable root, not one
// itself) with O_PATH and returns it with p's last component.
func (a *Agent) openParent(p string) (int, string, error) {
	root, comps, err := a.confine(p, false)
	if err != nil {
		return -1, "", err
	}
	fd, err := a.walkDir(root, comps[:len(comps)-1], unix.O_PATH)
	if err != nil {
		return -1, "", err
	}
	return fd, comps[len(comps)-1], nil
}

// entryOf describes a file from its lstat.
func entryOf(name, p string, st *unix.Stat_t) Entry {
	e := Entry{Name: name, Path: p, Size: st.Size, Mode: st.Mode & 0o777,
		ModTime: time.Unix(st.Mtim.Unix()).UTC(), Type: "other"}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Type, e.Dir = "dir", true
	case unix.S_IFREG:
		e.Type = "file"
	case unix.S_IFLNK:
		e.Type = "symlink"
	}
	return e
}

// entryAt describes name in the directory dir, p being its path; a
// symbolic link with what it holds.
func entryAt(dir int, name, p string) (Entry, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, fmt.Errorf("stat %s: %w", p, err)
	}
	e := entryOf(name, p, &st)
	if e.Type == "symlink" {
		buf := make([]byte, unix.PathMax)
		if n, err := unix.Readlinkat(dir, name, buf); err == nil {
			e.SymlinkTarget = string(buf[:n])
		}
	}
	return e, nil
}

// stat describes p, a root or a path under one, as user.
func (a *Agent) stat(p string, user identity) (Entry, error) {
	return asUser(user, func() (Entry, error) { return a.statAs(p) })
}

func (a *Agent) statAs(p string) (Entry, error) {
	root, comps, err := a.confine(p, true)
	if err != nil {
		return Entry{}, err
	}
	if len(comps) == 0 {
		fd, err := a.walkDir(root, nil, unix.O_PATH)
		if err != nil {
			return Entry{}, err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return Entry{}, fmt.Errorf("stat %s: %w", p, err)
		}
		name := filepath.Base(root)
		if root == "/" {
			name = ""
		}
		return entryOf(name, root, &st), nil
	}
	dir, name, err := a.openParent(p)
	if err != nil {
		return Entry{}, err
	}
	defer unix.Close(dir)
	return entryAt(dir, name, p)
}

// listFrame is how many bytes of listing lines the agent gathers into one
// msgFileData frame; an entry's line is far shorter (a name is at most 255
// bytes, a path at most MaxListDepth of them below its root).
const listFrame = 256 << 10

// lister streams a listing to the host as lines of JSON, at most
// MaxListEntries of them.
type lister struct {
	a    *Agent
	id   uint32
	buf  []byte
	left int
}

func (a *Agent) newLister(id uint32) *lister { return &lister{a: a, id: id, left: MaxListEntries} }

func (l *lister) add(e Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode entry: %w", err)
	}
	if len(l.buf) > 0 && len(l.buf)+len(b)+1 > listFrame {
		if err := l.flush(); err != nil {
			return err
		}
	}
	l.buf = append(append(l.buf, b...), '\n')
	l.left--
	return nil
}

func (l *lister) flush() error {
	if len(l.buf) == 0 {
		return nil
	}
	err := l.a.send(msgFileData, l.id, l.buf)
	l.buf = l.buf[:0]
	return err
}

// done flushes the listing and answers the request.
func (l *lister) done(err error) {
	if err == nil {
		err = l.flush()
	}
	l.a.reply(l.id, err)
}

// readNames reads up to max names of the directory open at fd.
func readNames(fd, max int) ([]string, error) {
	buf := make([]byte, 32<<10)
	var names []string
	for len(names) < max {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], max-len(names), names)
	}
	return names, nil
}

// listDepth lists req.Path and, to req.Depth levels, the directories under
// it, as the host's request id: each directory's entries by name, each
// directory's contents right after it. Symbolic links are listed, not
// followed; a subdirectory that is gone or unreadable is listed but not
// entered.
func (a *Agent) listDepth(id uint32, req listRequest) {
	l := a.newLister(id)
	if req.Depth < 1 || req.Depth > MaxListDepth {
		l.done(refuse(KindInvalid, "list depth %d is not within 1..%d", req.Depth, MaxListDepth))
		return
	}
	root, comps, err := a.confine(req.Path, true)
	if err != nil {
		l.done(err)
		return
	}
	user, err := a.resolveUser(req.User)
	if err != nil {
		l.done(err)
		return
	}
	l.done(asUserDo(user, func() error {
		fd, err := a.walkDir(root, comps, unix.O_RDONLY)
		if err != nil {
			return err
		}
		return l.dir(fd, strings.TrimSuffix(req.Path, "/"), req.Depth)
	}))
}

// dir lists the directory open at fd, whose path is p, to depth levels,
// and closes fd.
func (l *lister) dir(fd int, p string, depth int) error {
	defer unix.Close(fd)
	names, err := readNames(fd, l.left)
	if err != nil {
		return fmt.Errorf("list %s: %w", p, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if l.left == 0 {
			return nil
		}
		cp := p + "/" + name
		e, err := entryAt(fd, name, cp)
		if errors.Is(err, unix.ENOENT) {
			continue // removed since it was read
		}
		if err != nil {
			return err
		}
		if err := l.add(e); err != nil {
			return err
		}
		if !e.Dir || depth == 1 || l.a.systemPlace(cp) {
			continue
		}
		sub, err := stepDir(fd, name, cp, unix.O_RDONLY)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EACCES) || kindOf(err) == KindSymlink {
			continue // gone, unreadable (its entry shows why), or replaced by a link
		}
		if err != nil {
			return err
		}
		if err := l.dir(sub, cp, depth-1); err != nil {
			return err
		}
	}
	return nil
}

// mkdir makes req.Path, and with req.Parents the directories on the way;
// with req.Parents a directory that is there already is no error.
func (a *Agent) mkdir(req mkdirRequest) error {
	root, comps, err := a.confine(req.Path, false)
	if err != nil {
		return err
	}
	user, err := a.resolveUser(req.User)
	if err != nil {
		return err
	}
	return asUserDo(user, func() error { return a.mkdirAs(req, root, comps) })
}

func (a *Agent) mkdirAs(req mkdirRequest, root string, comps []string) error {
	var err error
	var dir int
	if req.Parents {
		dir, err = a.walkMaking(root, comps[:len(comps)-1])
	} else {
		dir, err = a.walkDir(root, comps[:len(comps)-1], unix.O_PATH)
	}
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	name := comps[len(comps)-1]
	switch err := unix.Mkdirat(dir, name, 0o755); {
	case err == nil:
		return nil
	case !errors.Is(err, unix.EEXIST) || !req.Parents:
		return fmt.Errorf("mkdir %s: %w", req.Path, err)
	}
	// There already: no error if it is a directory, not a link to one.
	fd, err := stepDir(dir, name, req.Path, unix.O_PATH)
	if errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("mkdir %s: %w", req.Path, unix.EEXIST)
	}
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// move renames req.From to req.To, both under a writable root: what is at
// To is replaced as rename(2) replaces it. /workspace and /tmp are separate
// mounts in a sandbox, so a move from one to the other is EXDEV.
func (a *Agent) move(req moveRequest) error {
	user, err := a.resolveUser(req.User)
	if err != nil {
		return err
	}
	return asUserDo(user, func() error { return a.moveAs(req) })
}

func (a *Agent) moveAs(req moveRequest) error {
	from, fromName, err := a.openParent(req.From)
	if err != nil {
		return err
	}
	defer unix.Close(from)
	to, toName, err := a.openParent(req.To)
	if err != nil {
		return err
	}
	defer unix.Close(to)
	if err := unix.Renameat(from, fromName, to, toName); err != nil {
		return fmt.Errorf("move %s to %s: %w", req.From, req.To, err)
	}
	return nil
}

func (a *Agent) onStat(f frame) {
	var req pathRequest
	if !a.decode(f, "stat", &req) {
		return
	}
	user, err := a.resolveUser(req.User)
	if err != nil {
		a.fail(f.id, err)
		return
	}
	e, err := a.stat(req.Path, user)
	if err != nil {
		a.fail(f.id, err)
		return
	}
	a.sendJSON(msgOK, f.id, e)
}

func (a *Agent) onListDepth(f frame) {
	var req listRequest
	if a.decode(f, "list", &req) {
		// From a goroutine: a deep listing must not stall the control
		// stream's reader.
		go a.listDepth(f.id, req)
	}
}

func (a *Agent) onMkdir(f frame) {
	var req mkdirRequest
	if a.decode(f, "mkdir", &req) {
		a.reply(f.id, a.mkdir(req))
	}
}

func (a *Agent) onMove(f frame) {
	var req moveRequest
	if a.decode(f, "move", &req) {
		a.reply(f.id, a.move(req))
	}
}
