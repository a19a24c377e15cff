//go:build linux

package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Watches: the host asks the agent to report the changes in a directory
// (msgWatch), and in the directories under it for a recursive watch, and
// gets them as msgWatchEvents frames until it stops the watch (msgUnwatch)
// or the agent ends it (the directory was removed or moved away:
// msgWatchEnd). The directories are reached as the live file operations
// reach a path (fileops.go): a symbolic link is never followed, so a watch
// never leaves its tree. Each is watched through /proc/self/fd/N of the
// directory opened that way, not by its name, which a program could swap
// for a link in between.
//
// One inotify instance serves every watch of the agent: on runc every
// sandbox's agent has the same uid, and the kernel caps inotify instances
// per uid (fs.inotify.max_user_instances, 128 by default), so a sandbox
// takes at most one. Everything is bounded: watches at once (a further one
// is KindLimit), directories per watch, levels below the watched directory,
// and events waiting for the host per watch. What passes a bound, like an
// overflow of the kernel's own queue, is reported as an OpOverflow event,
// never dropped in silence.
const (
	maxWatches    = 32
	maxWatchDirs  = 4096
	maxWatchDepth = MaxListDepth
	maxWatchQueue = 4096
	// watchFrame is how many bytes of events one msgWatchEvents frame
	// carries at most.
	watchFrame = 256 << 10
)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watchSet is the agent's watches; its zero value is ready, and the inotify
// instance comes with the first watch.
type watchSet struct {
	mu  sync.Mutex
	fd  int // the inotify instance's
	ino *os.File
	// byID are the watches by the host's id.
	byID map[uint32]*watch
	// byWD are the directories each watch descriptor stands for, by
	// watch: watches of overlapping trees share descriptors.
	byWD map[int32]map[*watch]string
}

// watch is one of the host's watches. Its fields are guarded by the set's
// mu.
type watch struct {
	id        uint32
	root      string
	recursive bool
	// user reaches and watches the directories (asUser).
	user     identity
	dirs     map[int32]string // the directories watched, by descriptor
	pending  []WatchEvent     // for the host
	overflow bool             // events were lost since pending was sent
	// end is set when the watch ends: an empty kind when the host stopped
	// it, else why the agent did.
	end  *errorReply
	wake chan struct{}
	// sent is closed when sendWatch has returned: the end is sent (or
	// the host is gone).
	sent chan struct{}
}

func (w *watch) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// push queues an event for the host; one just like the last is merged
// into it.
func (w *watch) push(p, op string) {
	e := WatchEvent{Path: p, Op: op}
	switch n := len(w.pending); {
	case w.end != nil:
		return
	case n > 0 && w.pending[n-1] == e:
		return
	case n >= maxWatchQueue:
		w.overflow = true
	default:
		w.pending = append(w.pending, e)
	}
	w.poke()
}

// watching reports whether w watches directory p.
func (w *watch) watching(p string) bool {
	for _, dp := range w.dirs {
		if dp == p {
			return true
		}
	}
	return false
}

func (w *watch) lost() {
	w.overflow = true
	w.poke()
}

// startWatch begins the watch the host asked for under id.
func (a *Agent) startWatch(id uint32, req watchRequest) (*watch, error) {
	root, comps, err := a.confine(req.Path, true)
	if err != nil {
		return nil, err
	}
	user, err := a.resolveUser(req.User)
	if err != nil {
		return nil, err
	}
	fd, err := asUser(user, func() (int, error) { return a.walkDir(root, comps, unix.O_RDONLY) })
	if err != nil {
		return nil, err
	}
	s := &a.watches
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.byID[id] != nil:
		unix.Close(fd)
		return nil, refuse(KindInvalid, "watch: id %d is watching already", id)
	case len(s.byID) >= maxWatches:
		unix.Close(fd)
		return nil, refuse(KindLimit, "watch: %d watches at once already", maxWatches)
	}
	if s.ino == nil {
		// Blocking: os.NewFile makes it non-blocking if the poller takes
		// it, and leaves it blocking otherwise.
		ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("watch: inotify: %w", err)
		}
		s.fd, s.ino = ifd, os.NewFile(uintptr(ifd), "inotify")
		s.byID, s.byWD = map[uint32]*watch{}, map[int32]map[*watch]string{}
		go a.readWatches(s.ino)
	}
	w := &watch{id: id, root: req.Path, recursive: req.Recursive, user: user, dirs: map[int32]string{},
		wake: make(chan struct{}, 1), sent: make(chan struct{})}
	if err := asUserDo(user, func() error { return a.addDir(w, fd, req.Path, false) }); err != nil {
		s.drop(w)
		return nil, err
	}
	s.byID[id] = w
	return w, nil
}

// addDir watches the directory open at fd (which it closes), whose path is
// p, and for a recursive watch the directories under it. emit reports what
// it finds in them as created: they appeared after the watch began, and
// what was made in them before they were watched has no event of its own.
// Only the watched directory's own failure is an error; a directory under
// it that cannot be watched is an overflow. s.mu is held.
func (a *Agent) addDir(w *watch, fd int, p string, emit bool) error {
	defer unix.Close(fd)
	s := &a.watches
	if len(w.dirs) >= maxWatchDirs {
		w.lost()
		return nil
	}
	wd, err := unix.InotifyAddWatch(s.fd, "/proc/self/fd/"+strconv.Itoa(fd), watchMask)
	if errors.Is(err, unix.ENOSPC) {
		// The user's inotify watches are used up (programs can use them
		// all): a limit, not a full disk.
		err = refuse(KindLimit, "the sandbox's user has as many inotify watches as it may")
	}
	if err != nil {
		err = fmt.Errorf("watch %s: %w", p, err)
		if p != w.root {
			w.lost()
			return nil
		}
		return err
	}
	if w.dirs[int32(wd)] == p {
		return nil // found and scanned already
	}
	s.ref(w, int32(wd), p)
	if !w.recursive {
		return nil
	}
	deep := strings.Count(p[len(w.root):], "/") >= maxWatchDepth
	buf := make([]byte, 16<<10)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err != nil {
			w.lost()
		}
		if n <= 0 {
			return nil
		}
		for b := buf[:n]; len(b) > 0; {
			name, typ, rest := nextDirent(b)
			b = rest
			if name != "" {
				a.addEntry(w, fd, p, name, typ, emit, deep)
			}
		}
	}
}

// nextDirent parses the first linux_dirent64 record of b: its name ("" for
// "." and ".."), its type, and the records after it.
func nextDirent(b []byte) (string, byte, []byte) {
	const nameAt = 19 // d_ino, d_off, d_reclen, d_type
	if len(b) < nameAt {
		return "", 0, nil
	}
	n := int(binary.NativeEndian.Uint16(b[16:18]))
	if n < nameAt || n > len(b) {
		return "", 0, nil
	}
	name := b[nameAt:n]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	if s := string(name); s != "." && s != ".." && binary.NativeEndian.Uint64(b) != 0 {
		return s, b[18], b[n:]
	}
	return "", 0, b[n:]
}

// addEntry reports name, found in w's directory p (open at fd), as created
// if emit, and watches it if it is a directory (typ is its d_type). s.mu is
// held.
func (a *Agent) addEntry(w *watch, fd int, p, name string, typ byte, emit, deep bool) {
	cp := subPath(p, name)
	if emit {
		w.push(cp, OpCreate)
	}
	switch typ {
	case unix.DT_DIR:
	case unix.DT_UNKNOWN: // the file system does not say
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return
		}
	default:
		return
	}
	if a.systemPlace(cp) {
		return
	}
	if deep {
		w.lost()
		return
	}
	sub, err := stepDir(fd, name, cp, unix.O_RDONLY)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) && kindOf(err) != KindSymlink {
			w.lost()
		}
		return
	}
	_ = a.addDir(w, sub, cp, emit)
}

// subPath is the path of name in the directory p (which may be / in a
// system sandbox).
func subPath(p, name string) string {
	if p == "/" {
		return p + name
	}
	return p + "/" + name
}

// ref records that descriptor wd stands for directory p in w.
func (s *watchSet) ref(w *watch, wd int32, p string) {
	w.dirs[wd] = p
	if s.byWD[wd] == nil {
		s.byWD[wd] = map[*watch]string{}
	}
	s.byWD[wd][w] = p
}

// unref forgets descriptor wd in w, and tells the kernel when no watch
// needs it.
func (s *watchSet) unref(w *watch, wd int32) {
	delete(w.dirs, wd)
	refs := s.byWD[wd]
	delete(refs, w)
	if len(refs) == 0 {
		delete(s.byWD, wd)
		_, _ = unix.InotifyRmWatch(s.fd, uint32(wd))
	}
}

// unrefTree forgets, in w, directory p and those under it.
func (s *watchSet) unrefTree(w *watch, p string) {
	for wd, dp := range w.dirs {
		if dp == p || strings.HasPrefix(dp, p+"/") {
			s.unref(w, wd)
		}
	}
}

// drop forgets w's directories.
func (s *watchSet) drop(w *watch) {
	for wd := range w.dirs {
		s.unref(w, wd)
	}
}

// end ends w: why has an empty kind when the host stopped it.
func (s *watchSet) end(w *watch, why errorReply) {
	if w.end != nil {
		return
	}
	s.drop(w)
	delete(s.byID, w.id)
	w.end = &why
	if why.Kind == "" {
		w.pending, w.overflow = nil, false
	}
	w.poke()
}

// readWatches reads the inotify instance for as long as the agent lives.
func (a *Agent) readWatches(ino *os.File) {
	buf := make([]byte, 64<<10)
	for {
		n, err := ino.Read(buf)
		if err != nil {
			a.log.Error("read inotify", "err", err)
			return
		}
		a.watches.mu.Lock()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			wd := int32(binary.NativeEndian.Uint32(buf[off:]))
			mask := binary.NativeEndian.Uint32(buf[off+4:])
			size := int(binary.NativeEndian.Uint32(buf[off+12:]))
			off += unix.SizeofInotifyEvent
			name := string(buf[off:min(off+size, n)])
			if i := strings.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += size
			a.watchEvent(wd, mask, name)
		}
		a.watches.mu.Unlock()
	}
}

// watchEvent dispatches one inotify event to the watches it concerns. s.mu
// is held.
func (a *Agent) watchEvent(wd int32, mask uint32, name string) {
	s := &a.watches
	if mask&unix.IN_Q_OVERFLOW != 0 {
		for _, w := range s.byID {
			w.lost()
		}
		return
	}
	for w, p := range s.byWD[wd] {
		switch {
		case mask&unix.IN_IGNORED != 0: // the directory is gone
			s.unref(w, wd)
			if p == w.root {
				s.end(w, errorReply{Kind: "ENOENT", Message: "watch: " + p + " is gone"})
			}
		case name == "":
			// The directory itself: the changes of any directory but
			// the watched one come from its parent.
			if p != w.root {
				continue
			}
			switch {
			case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
				s.end(w, errorReply{Kind: "ENOENT", Message: "watch: " + p + " was removed or moved"})
			case mask&unix.IN_ATTRIB != 0:
				w.push(p, OpChmod)
			}
		default:
			a.watchChange(w, p, mask, name)
		}
	}
}

// watchChange reports a change of name in w's directory p.
func (a *Agent) watchChange(w *watch, p string, mask uint32, name string) {
	s := &a.watches
	cp := subPath(p, name)
	dir := mask&unix.IN_ISDIR != 0
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		if dir && w.recursive && w.watching(cp) {
			return // found by the scan of a directory made just before
		}
		w.push(cp, OpCreate)
		if dir && w.recursive {
			if strings.Count(cp[len(w.root):], "/") > maxWatchDepth {
				w.lost()
				return
			}
			root, comps, err := a.confine(cp, false)
			if err == nil {
				err = asUserDo(w.user, func() error {
					fd, err := a.walkDir(root, comps, unix.O_RDONLY)
					if err != nil {
						return err
					}
					return a.addDir(w, fd, cp, true)
				})
			}
			if err != nil && !errors.Is(err, unix.ENOENT) && kindOf(err) != KindSymlink {
				w.lost()
			}
		}
	case mask&unix.IN_MODIFY != 0:
		w.push(cp, OpWrite)
	case mask&unix.IN_ATTRIB != 0:
		w.push(cp, OpChmod)
	case mask&unix.IN_DELETE != 0:
		w.push(cp, OpRemove)
		if dir {
			s.unrefTree(w, cp)
		}
	case mask&unix.IN_MOVED_FROM != 0:
		w.push(cp, OpRename)
		if dir {
			s.unrefTree(w, cp)
		}
	}
}

// sendWatch sends w's events to the host as they come, and its end.
func (a *Agent) sendWatch(w *watch) {
	defer close(w.sent)
	s := &a.watches
	for range w.wake {
		s.mu.Lock()
		evs, over, end := w.pending, w.overflow, w.end
		w.pending, w.overflow = nil, false
		s.mu.Unlock()
		if over {
			evs = append(evs, WatchEvent{Path: w.root, Op: OpOverflow})
		}
		if err := a.sendEvents(w.id, evs); err != nil {
			return // the host is gone
		}
		if end != nil {
			a.sendJSON(msgWatchEnd, w.id, *end)
			return
		}
	}
}

// sendEvents sends evs in frames of at most watchFrame bytes.
func (a *Agent) sendEvents(id uint32, evs []WatchEvent) error {
	buf := []byte{'['}
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		if len(buf) > 1 && len(buf)+len(b)+2 > watchFrame {
			if err := a.send(msgWatchEvents, id, append(buf, ']')); err != nil {
				return err
			}
			buf = buf[:1]
		}
		if len(buf) > 1 {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
	}
	if len(buf) == 1 {
		return nil
	}
	return a.send(msgWatchEvents, id, append(buf, ']'))
}

func (a *Agent) onWatch(f frame) {
	var req watchRequest
	if !a.decode(f, "watch", &req) {
		return
	}
	w, err := a.startWatch(f.id, req)
	if err != nil {
		a.fail(f.id, err)
		return
	}
	// Answered before any event: sendWatch starts after.
	a.send(msgOK, f.id, nil)
	go a.sendWatch(w)
}

func (a *Agent) onUnwatch(f frame) {
	s := &a.watches
	s.mu.Lock()
	defer s.mu.Unlock()
	// A watch that ended by itself has sent its end already.
	if w := s.byID[f.id]; w != nil {
		s.end(w, errorReply{})
	}
}
