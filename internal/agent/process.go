//go:build linux

package agent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a process the agent started, or a zygote forked for it.
type proc struct {
	id         uint32
	pid        int
	persistent bool
	stdin      *os.File
	readers    sync.WaitGroup
	exited     chan struct{}
	status     ExitStatus
	// pty is the master of the process's terminal (it is stdin too), or
	// nil (pty.go).
	pty *os.File
	// in queues what the host sends for stdin, for the process's writer
	// (stdin.go); nil without a stdin.
	in *stdinQueue
	// outMu orders the output frames and the end: once detached (the
	// process has ended but something it left holds its output open), what
	// still comes is read and dropped.
	outMu      sync.Mutex
	detached   bool
	lastOutput time.Time
}

// outputGrace is how long the end of a persistent process waits for more
// of its output once it has exited (drain). A process it left behind (a
// daemon started without redirecting its output) may hold the output open
// for ever: the exit is reported then, and what the daemon writes later
// is read (so that it never blocks) and dropped.
const outputGrace = 500 * time.Millisecond

func (a *Agent) byID(id uint32) *proc {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, p := range a.procs {
		if p.id == id {
			return p
		}
	}
	return nil
}

// start forks and execs a process (or asks a zygote to fork one) and starts
// streaming its output. It returns the pid, or 0 when the answer comes
// later (a zygote that must report ready, a child a zygote must fork): then
// reply sends the started reply or the error.
func (a *Agent) start(id uint32, req StartRequest) (int, error) {
	if len(req.Argv) == 0 {
		return 0, refuse(KindInvalid, "start: empty argv")
	}
	if req.Via != 0 && req.Zygote {
		return a.startZygoteVia(id, req) // zygote_via.go
	}
	if req.PTY != nil && (req.Via != 0 || req.Zygote) {
		return 0, refuse(KindInvalid, "start: a terminal is for a process of the agent's own, not a zygote's")
	}
	var z *zygote
	var user identity
	var err error
	if req.Via != 0 {
		if z = a.zygote(req.Via); z == nil {
			return 0, refuse(KindZygote, "start: no zygote %d", req.Via)
		}
		if user, err = a.viaUser(z, req.User); err != nil {
			return 0, err
		}
	} else if user, err = a.resolveUser(req.User); err != nil {
		return 0, err
	}
	req.Env = userEnv(req.Env, user)
	req.Dir = a.hostPath(req.Dir)
	req.Argv, req.Env = a.hostArgs(req.Argv, req.Env)
	path := req.Argv[0]
	if req.Via == 0 {
		if path, err = lookPath(req.Argv[0], req.Env); err != nil {
			return 0, err
		}
	}
	p := &proc{id: id, persistent: req.Persistent || req.Zygote, exited: make(chan struct{})}
	var io *procIO
	if req.PTY != nil {
		io, err = a.ptyStdio(p, *req.PTY, req.StatusFD, user)
	} else {
		io, err = a.stdio(p, req.Stdin, req.StatusFD && !req.Zygote)
	}
	if err != nil {
		return 0, err
	}
	defer io.closeChild()
	if z != nil {
		if sp := z.takeSpare(); sp != nil {
			if err := sp.serve(id, req, io.child); err == nil {
				io.closeChild()
				a.adopt(p, io, sp.pid)
				return sp.pid, nil
			}
			// The spare is gone: the zygote forks one now.
		}
		reply, err := z.fork(id, req, io.child)
		if err != nil {
			io.closeParent(p)
			return 0, err
		}
		io.closeChild() // before waiting: the child's exit must reach EOF
		go a.adoptVia(z, p, io, reply)
		return 0, nil
	}
	files := make([]uintptr, len(io.child))
	for i, f := range io.child {
		files[i] = f.Fd()
	}
	var zs *os.File
	if req.Zygote {
		var err error
		var zc *os.File
		if zs, zc, err = socketpair(); err != nil {
			io.closeParent(p)
			return 0, err
		}
		defer zc.Close()
		files = append(files, zc.Fd())
	}

	a.mu.Lock()
	pid, err := syscall.ForkExec(path, req.Argv, &syscall.ProcAttr{
		Dir:   req.Dir,
		Env:   req.Env,
		Files: files,
		// With a terminal, fd 0 (the slave) becomes the new session's
		// controlling terminal.
		Sys: &syscall.SysProcAttr{Setsid: true, Setctty: req.PTY != nil, Ctty: 0, Credential: user.credential()},
	})
	if err == nil {
		p.pid = pid
		a.procs[pid] = p
	}
	a.mu.Unlock()
	if err != nil {
		io.closeParent(p)
		if zs != nil {
			zs.Close()
		}
		return 0, fmt.Errorf("start %s: %w", req.Argv[0], err)
	}
	a.run(p, io)
	if zs != nil {
		z := a.newZygote(id, p, zs, user)
		go a.awaitReady(z)
		return 0, nil
	}
	return pid, nil
}

// procIO are the pipes between the agent and a process: the child's ends
// (stdin, stdout, stderr[, status]) and the agent's readers.
type procIO struct {
	child   []*os.File
	readers []*os.File
	types   []byte
}

// stdio makes a process's pipes; p.stdin gets the agent's end of stdin.
func (a *Agent) stdio(p *proc, stdin, status bool) (*procIO, error) {
	io := &procIO{}
	if stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		io.child, p.stdin = append(io.child, r), w
		p.in = newStdinQueue()
	} else {
		null, err := os.Open(os.DevNull)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		io.child = append(io.child, null)
	}
	streams := []byte{msgStdout, msgStderr}
	if status {
		streams = append(streams, msgStatus)
	}
	for _, typ := range streams {
		if err := io.addPipe(p, typ); err != nil {
			return nil, err
		}
	}
	return io, nil
}

// addPipe gives the child one more output stream, of frame type typ. On
// error it closes every end made so far.
func (io *procIO) addPipe(p *proc, typ byte) error {
	r, w, err := os.Pipe()
	if err != nil {
		io.closeChild()
		io.closeParent(p)
		return fmt.Errorf("output pipe: %w", err)
	}
	io.child = append(io.child, w)
	io.readers = append(io.readers, r)
	io.types = append(io.types, typ)
	return nil
}

// closeChild closes the child's ends (once the child has its own copies).
func (io *procIO) closeChild() {
	for _, f := range io.child {
		f.Close()
	}
	io.child = nil
}

// closeParent closes the agent's ends of a process that did not start.
func (io *procIO) closeParent(p *proc) {
	for _, r := range io.readers {
		r.Close()
	}
	io.readers = nil
	if p.stdin != nil {
		p.stdin.Close()
	}
}

// run streams a started process's output and reports its end.
func (a *Agent) run(p *proc, io *procIO) {
	for i, r := range io.readers {
		p.readers.Add(1)
		go a.pump(p, io.types[i], r)
	}
	if p.in != nil {
		go a.writeStdin(p)
	}
	go a.finish(p)
}

// pumpBufs are the pumps' buffers, kept for the next process's: two new
// ones of 64 KiB for every execution were most of what the agent
// allocated, and its garbage collector's work.
var pumpBufs = sync.Pool{New: func() any { return new([64 << 10]byte) }}

// pump copies one output stream of p into frames until EOF.
func (a *Agent) pump(p *proc, typ byte, r *os.File) {
	defer p.readers.Done()
	defer r.Close()
	b := pumpBufs.Get().(*[64 << 10]byte)
	defer pumpBufs.Put(b)
	buf := b[:]
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if err := a.output(p, typ, buf[:n]); err != nil {
				// The host is gone; keep draining so the writer is not
				// blocked forever, then stop.
				_, _ = io.Copy(io.Discard, r)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// output sends one chunk of p's output, unless p's end was reported.
func (a *Agent) output(p *proc, typ byte, b []byte) error {
	p.outMu.Lock()
	defer p.outMu.Unlock()
	p.lastOutput = time.Now()
	if p.detached {
		return nil
	}
	return a.send(typ, p.id, b)
}

// drain waits for the output of p, which has exited, to close. Nothing is
// left of a process that is not persistent (finish killed the rest), so
// its output closes. A persistent one's may be held open by a process it
// left behind: once no output came for outputGrace (or outputGrace*10 in
// all have passed), p is detached from its output.
func (a *Agent) drain(p *proc) {
	drained := make(chan struct{})
	go func() {
		p.readers.Wait()
		close(drained)
	}()
	if !p.persistent {
		<-drained
		return
	}
	tick := time.NewTicker(outputGrace / 5)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * outputGrace); ; {
		select {
		case <-drained:
			return
		case now := <-tick.C:
			p.outMu.Lock()
			if now.Sub(p.lastOutput) >= outputGrace || now.After(deadline) {
				p.detached = true
				p.outMu.Unlock()
				return
			}
			p.outMu.Unlock()
		}
	}
}

// finish waits for p to exit, ends what it left behind, waits for its output
// to drain (for outputGrace at most) and reports its exit.
func (a *Agent) finish(p *proc) {
	<-p.exited
	if !p.persistent {
		p.status.Reaped = a.killAll(syscall.SIGKILL, false)
	}
	a.drain(p)
	p.endStdin()
	a.mu.Lock()
	delete(a.procs, p.pid)
	a.reporting(p) // resume.go
	a.mu.Unlock()
	a.sendJSON(msgExit, p.id, p.status)
	a.reported(p)
}

// reap collects every exited child; the agent is the namespace's init, so
// orphans of every program end up here.
func (a *Agent) reap() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG|syscall.WUNTRACED, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if ws.Stopped() {
			a.stoppedLocked(pid)
		} else if st, ok := exitStatus(ws); ok {
			a.exitedLocked(pid, st)
		}
	}
}

// stoppedLocked: pid was stopped (SIGSTOP, SIGTSTP…). A zygote that reaps
// its own children cannot while stopped, and their exits would wait for
// it: it is killed, so they become the agent's, as init, and are reaped
// here; the reset's ping then finds the zygote gone and the sandbox is
// replaced. Any other stopped process is left as it is. a.mu is held.
func (a *Agent) stoppedLocked(pid int) {
	for _, z := range a.zygotes {
		if z.proc.pid == pid && z.reaps.Load() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return
		}
	}
}

// exitStatus is how a process whose wait status is ws ended; false if it has
// not (stopped or continued).
func exitStatus(ws syscall.WaitStatus) (ExitStatus, bool) {
	switch {
	case ws.Exited():
		return ExitStatus{Code: ws.ExitStatus()}, true
	case ws.Signaled():
		return ExitStatus{Code: -1, Signal: int(ws.Signal())}, true
	}
	return ExitStatus{}, false
}

// exitedLocked records that pid ended with st: reaped by the agent, or by
// the zygote that forked it (zygote.go). a.mu is held.
func (a *Agent) exitedLocked(pid int, st ExitStatus) {
	p, ok := a.procs[pid]
	if !ok {
		// A zygote's child whose pid the zygote has not told yet (or a
		// spare that was dropped, or an orphan of a program).
		if len(a.orphans) < maxOrphans {
			a.orphans[pid] = st
		}
		delete(a.spares, pid)
		return
	}
	p.status = st
	select {
	case <-p.exited:
	default:
		close(p.exited)
	}
}

// killAll sends sig to every process in the sandbox but the agent and, unless
// includePersistent, persistent processes. It returns how many it signalled.
// In local mode the sandbox is the agent's descendants.
func (a *Agent) killAll(sig syscall.Signal, includePersistent bool) int {
	keep := map[int]bool{os.Getpid(): true}
	a.mu.Lock()
	for pid, p := range a.procs {
		if p.persistent && !includePersistent {
			keep[pid] = true
		}
	}
	if !includePersistent {
		for pid := range a.spares {
			keep[pid] = true
		}
	}
	a.mu.Unlock()
	n := 0
	// Loop because processes can fork while we read /proc; kill(-1) would be
	// atomic but cannot spare persistent processes.
	for round := 0; round < 100; round++ {
		hit := 0
		for _, pid := range a.sandboxPIDs(keep) {
			if syscall.Kill(pid, sig) == nil {
				hit++
			}
		}
		if round == 0 {
			n = hit
		}
		if hit == 0 || sig != syscall.SIGKILL {
			break
		}
		if len(keep) == 1 && !a.local {
			// Nothing to spare: kill(-1) cannot race with fork. Never in
			// local mode: there it is every process of the user.
			_ = syscall.Kill(-1, sig)
		}
	}
	return n
}

// sandboxPIDs returns the live processes of the sandbox, zombies excluded:
// every process the agent can see when it is the sandbox's init, its
// descendants in local mode; but those in skip.
func (a *Agent) sandboxPIDs(skip map[int]bool) []int {
	if !a.local {
		procs := listProcs(skip)
		pids := make([]int, 0, len(procs))
		for pid := range procs {
			pids = append(pids, pid)
		}
		return pids
	}
	procs := listProcs(nil)
	children := map[int][]int{}
	for pid, ppid := range procs {
		children[ppid] = append(children[ppid], pid)
	}
	var pids []int
	for todo := children[os.Getpid()]; len(todo) > 0; {
		pid := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[pid]...)
		if !skip[pid] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// listProcs returns the live processes the agent can see, zombies
// excluded, with their parents, but those in skip: a reset skips the
// processes it spares (the agent, zygotes, spares) without reading their
// /proc/PID/stat, most of what it used to read.
func listProcs(skip map[int]bool) map[int]int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	procs := map[int]int{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || skip[pid] {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// The state and the parent's pid follow the last ')' of the
		// command name.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		procs[pid] = ppid
	}
	return procs
}

func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("start: %s not found in PATH: %w", name, syscall.ENOENT)
}
