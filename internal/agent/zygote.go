//go:build linux

package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxOrphans bounds the exit statuses the agent keeps for processes it
// reaped before anyone claimed them.
const maxOrphans = 4096

// zygoteTimeout bounds how long a zygote may take to fork a child or to
// answer a ping (a gVisor sandbox on a loaded machine can take seconds to
// fork), and readyTimeout how long it may take to preload.
const (
	zygoteTimeout = 30 * time.Second
	readyTimeout  = 2 * time.Minute
)

// zygote is a pre-started interpreter (see the protocol in proto.go).
type zygote struct {
	id   uint32 // its start request's id
	proc *proc
	conn *net.UnixConn

	mu      sync.Mutex
	waiting map[uint32]chan zygoteMsg // replies awaited, by request id or ping tag
	ready   chan zygoteMsg
	dead    chan struct{}
	tag     uint32
	spare   *spare // the latest spare, not yet used
	// reaps: the zygote reaps its children (its ready message said so).
	reaps atomic.Bool
	// user is who the zygote runs as, and so every child it forks.
	user identity
	// baseline is what the zygote passes on to its children (limits,
	// priority, affinity) when it said it was ready; a reset compares.
	// unchecked says why it could not be read: an agent of another uid
	// without CAP_SYS_RESOURCE (a live sandbox's, whose zygotes are never
	// reset) may not read it; a reset refuses such a zygote.
	baseline  integrity
	unchecked error
}

// spare is a child a zygote forked ahead of a request, and the socket on
// which it waits for one.
type spare struct {
	pid  int
	conn *net.UnixConn
}

func socketpair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("zygote socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "zygote"), os.NewFile(uintptr(fds[1]), "zygote-child"), nil
}

func (a *Agent) zygote(id uint32) *zygote {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.zygotes[id]
}

// viaUser is who a child of z runs as: z's user, which a request may name
// (user) but not change.
func (a *Agent) viaUser(z *zygote, user string) (identity, error) {
	if user == "" {
		return z.user, nil
	}
	id, err := a.resolveUser(user)
	if err != nil {
		return identity{}, err
	}
	if id.uid != z.user.uid {
		return identity{}, refuse(KindInvalid, "start: user %q: a zygote's children run as the zygote's user (uid %d)", user, z.user.uid)
	}
	return id, nil
}

// newZygote registers the zygote p, whose end of the control socket is s,
// and starts reading what it says.
func (a *Agent) newZygote(id uint32, p *proc, s *os.File, user identity) *zygote {
	z := &zygote{id: id, proc: p, waiting: map[uint32]chan zygoteMsg{}, ready: make(chan zygoteMsg, 1),
		dead: make(chan struct{}), tag: 1 << 31, user: user}
	c, err := net.FileConn(s)
	s.Close()
	if err == nil {
		z.conn, _ = c.(*net.UnixConn)
	}
	a.mu.Lock()
	a.zygotes[id] = z
	a.mu.Unlock()
	go z.read(a)
	return z
}

// read dispatches the zygote's messages until its socket closes.
func (z *zygote) read(a *Agent) {
	defer func() {
		a.mu.Lock()
		delete(a.zygotes, z.id)
		a.mu.Unlock()
		z.mu.Lock()
		close(z.dead)
		z.mu.Unlock()
	}()
	if z.conn == nil {
		return
	}
	defer z.conn.Close()
	defer z.setSpare(nil)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := z.conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fds := receivedFDs(oob[:oobn])
		var m zygoteMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			closeFDs(fds)
			a.log.Warn("zygote said something unreadable", "err", err)
			return
		}
		if m.Spare > 1 {
			a.mu.Lock()
			a.spares[m.Spare] = true
			a.mu.Unlock()
			if len(fds) == 1 {
				z.setSpare(newSpare(m.Spare, fds[0]))
			} else {
				closeFDs(fds)
			}
			continue
		}
		closeFDs(fds)
		if m.Exited > 1 {
			if st, ok := exitStatus(syscall.WaitStatus(m.Status)); ok {
				a.mu.Lock()
				a.exitedLocked(m.Exited, st)
				a.mu.Unlock()
			}
			continue
		}
		if m.Ready != nil {
			z.reaps.Store(m.Reaps)
			in, err := readIntegrityOf(z.proc.pid)
			z.mu.Lock()
			z.baseline, z.unchecked = in, err
			z.mu.Unlock()
			select {
			case z.ready <- m:
			default:
			}
			continue
		}
		tag := m.ID
		if m.Pong != 0 {
			tag = m.Pong
		}
		z.mu.Lock()
		ch := z.waiting[tag]
		delete(z.waiting, tag)
		z.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// receivedFDs returns the file descriptors an SCM_RIGHTS message carried.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if r, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, r...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// newSpare wraps the socket fd of the spare pid; nil if fd is not a socket.
func newSpare(pid, fd int) *spare {
	unix.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "spare")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil
	}
	return &spare{pid: pid, conn: uc}
}

// setSpare makes sp the zygote's spare; the one it replaces, if unused, gets
// its socket closed and exits.
func (z *zygote) setSpare(sp *spare) {
	z.mu.Lock()
	old := z.spare
	z.spare = sp
	z.mu.Unlock()
	if old != nil {
		old.conn.Close()
	}
}

// takeSpare returns the zygote's spare, if any, for one request.
func (z *zygote) takeSpare() *spare {
	z.mu.Lock()
	defer z.mu.Unlock()
	sp := z.spare
	z.spare = nil
	return sp
}

// serve sends req with the child's stdio to sp, which runs it: no reply,
// sp.pid is the process. An error means sp did not get it (it died).
func (sp *spare) serve(id uint32, req StartRequest, child []*os.File) error {
	defer sp.conn.Close()
	b, err := json.Marshal(zygoteMsg{ID: id, Argv: req.Argv, Env: req.Env, Dir: req.Dir, StatusFD: req.StatusFD})
	if err != nil {
		return fmt.Errorf("encode spare request: %w", err)
	}
	ints := make([]int, len(child))
	for i, f := range child {
		ints[i] = int(f.Fd())
	}
	if _, _, err := sp.conn.WriteMsgUnix(b, unix.UnixRights(ints...), nil); err != nil {
		return fmt.Errorf("write to the spare: %w", err)
	}
	return nil
}

// send registers a wait for the reply to tag and writes m with fds; the
// reply comes on the returned channel (forget ends the wait).
func (z *zygote) send(tag uint32, m zygoteMsg, fds []*os.File) (<-chan zygoteMsg, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode zygote request: %w", err)
	}
	ch := make(chan zygoteMsg, 1)
	z.mu.Lock()
	select {
	case <-z.dead:
		z.mu.Unlock()
		return nil, refuse(KindZygote, "the zygote is gone")
	default:
	}
	z.waiting[tag] = ch
	z.mu.Unlock()
	var oob []byte
	if len(fds) > 0 {
		ints := make([]int, len(fds))
		for i, f := range fds {
			ints[i] = int(f.Fd())
		}
		oob = unix.UnixRights(ints...)
	}
	if _, _, err := z.conn.WriteMsgUnix(b, oob, nil); err != nil {
		z.forget(tag)
		return nil, refuse(KindZygote, "write to the zygote: %v", err)
	}
	return ch, nil
}

// forget stops waiting for the reply to tag.
func (z *zygote) forget(tag uint32) {
	z.mu.Lock()
	delete(z.waiting, tag)
	z.mu.Unlock()
}

// call sends m and waits for the reply to tag.
func (z *zygote) call(tag uint32, m zygoteMsg, timeout time.Duration) (zygoteMsg, error) {
	ch, err := z.send(tag, m, nil)
	if err != nil {
		return zygoteMsg{}, err
	}
	defer z.forget(tag)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r.Error != "" {
			return r, refuse(KindZygote, "zygote: %s", r.Error)
		}
		return r, nil
	case <-z.dead:
		return zygoteMsg{}, refuse(KindZygote, "the zygote is gone")
	case <-t.C:
		return zygoteMsg{}, refuse(KindZygote, "the zygote does not answer")
	}
}

// fork asks the zygote to fork a child for req with the given stdio; the
// reply comes on the returned channel.
func (z *zygote) fork(id uint32, req StartRequest, child []*os.File) (<-chan zygoteMsg, error) {
	ch, err := z.send(id, zygoteMsg{ID: id, Argv: req.Argv, Env: req.Env, Dir: req.Dir, StatusFD: req.StatusFD}, child)
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return ch, nil
}

// adoptVia waits for the zygote to report the child it forked for p, then
// registers and runs it like a child of the agent's own: the zygote (or,
// without pidfds, the agent as init) reaps it.
func (a *Agent) adoptVia(z *zygote, p *proc, io *procIO, ch <-chan zygoteMsg) {
	t := time.NewTimer(zygoteTimeout)
	defer t.Stop()
	var m zygoteMsg
	var err error
	select {
	case m = <-ch:
		if m.Error != "" {
			err = refuse(KindZygote, "start: zygote: %s", m.Error)
		} else if m.PID <= 1 {
			err = refuse(KindZygote, "start: zygote reported pid %d", m.PID)
		}
	case <-z.dead:
		err = refuse(KindZygote, "start: the zygote is gone")
	case <-t.C:
		err = refuse(KindZygote, "start: the zygote does not answer")
	}
	if err != nil {
		z.forget(p.id)
		io.closeParent(p)
		a.fail(p.id, err)
		return
	}
	a.adopt(p, io, m.PID)
	a.sendJSON(msgStarted, p.id, startedReply{PID: p.pid})
}

// adopt registers pid, a child a zygote forked, as p's process and starts
// streaming its output. It may have ended already: then the agent has its
// status among the orphans.
func (a *Agent) adopt(p *proc, io *procIO, pid int) {
	a.mu.Lock()
	p.pid = pid
	a.procs[p.pid] = p
	delete(a.spares, p.pid)
	if st, ok := a.orphans[p.pid]; ok {
		delete(a.orphans, p.pid)
		p.status = st
		close(p.exited)
	}
	a.mu.Unlock()
	a.run(p, io)
}

// awaitReady answers a zygote's start request once it is ready, or fails it
// (and kills the zygote) if it dies or takes too long.
func (a *Agent) awaitReady(z *zygote) {
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case m := <-z.ready:
		a.sendJSON(msgStarted, z.id, startedReply{PID: z.proc.pid, Ready: m.Ready})
		return
	case <-z.dead:
	case <-t.C:
	}
	_ = syscall.Kill(z.proc.pid, syscall.SIGKILL)
	a.fail(z.id, refuse(KindZygote, "start: the zygote did not become ready"))
}
