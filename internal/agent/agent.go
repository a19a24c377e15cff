//go:build linux

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Agent is PID 1 of a sandbox. It starts processes on the host's request,
// streams their output back, reaps every zombie and, when a process ends,
// kills what that process left behind.
//
// It runs with the sandbox's unprivileged uid and no capabilities, and marks
// itself non-dumpable so that programs in the sandbox cannot read its memory,
// environment or file descriptors through /proc.
type Agent struct {
	in  io.Reader
	log *slog.Logger

	wmu sync.Mutex // serialises frames on out
	out io.Writer

	// mu guards procs and is held across fork+register and around wait4, so
	// the reaper never reaps a child before it is registered.
	mu    sync.Mutex
	procs map[int]*proc // by pid
	// orphans are exit statuses of processes reaped before they were
	// registered (children of zygotes), by pid.
	orphans map[int]ExitStatus
	zygotes map[uint32]*zygote // by the id of their start request
	// spares are children zygotes forked ahead of a request (see
	// zygote.go); they are spared like persistent processes until used.
	spares map[int]bool
	files  map[uint32]*os.File
	// baseline is the agent's scheduling and resource limits at start,
	// which every process inherits; a reset checks they are unchanged.
	baseline integrity
}

type proc struct {
	id         uint32
	pid        int
	persistent bool
	stdin      *os.File
	readers    sync.WaitGroup
	exited     chan struct{}
	status     ExitStatus
}

// Serve runs the agent until the host closes the control stream. in and out
// are the stream; log receives diagnostics (the sandbox's stderr).
func Serve(in io.Reader, out io.Writer, log *slog.Logger) error {
	a := &Agent{in: in, out: out, log: log, procs: map[int]*proc{}, files: map[uint32]*os.File{},
		orphans: map[int]ExitStatus{}, zygotes: map[uint32]*zygote{}, spares: map[int]bool{}}
	return a.serve()
}

// ignoredSignals are signals programs in the sandbox may send to PID 1. The
// kernel delivers a signal to a namespace's init only when it has a handler,
// and the Go runtime installs handlers for nearly all signals, so the agent
// catches them all and drops them. That includes SIGSEGV, SIGBUS and SIGFPE:
// the runtime still crashes on a real fault, since it checks where a signal
// came from. (Catching, not ignoring: dispositions set to "ignore" would be
// inherited by every program the agent starts.)
var ignoredSignals = func() []os.Signal {
	var s []os.Signal
	for n := 1; n <= 64; n++ {
		switch syscall.Signal(n) {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG:
			continue
		}
		if n == 32 || n == 33 { // used by glibc/the Go runtime
			continue
		}
		s = append(s, syscall.Signal(n))
	}
	return s
}()

// ErrNotInit reports an agent started outside a sandbox. The agent kills
// every process it can see when a program ends; on a host that would be
// every process of the machine.
var ErrNotInit = errors.New("the agent runs only as PID 1 of a sandbox")

func (a *Agent) serve() error {
	if os.Getpid() != 1 {
		return ErrNotInit
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	// Whatever the runtime passed beyond stdio must not reach programs.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	reserveThreads(spareThreads)
	a.baseline = readIntegrity()
	// Handled, not ignored: an ignored signal stays ignored across exec,
	// and programs must start with every signal at its default.
	shield := make(chan os.Signal, 16)
	signal.Notify(shield, ignoredSignals...)
	go func() {
		for range shield {
		}
	}()
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	go func() {
		for range sigchld {
			a.reap()
		}
	}()

	hello, _ := json.Marshal(Hello{Version: Version, PID: os.Getpid(), UID: os.Getuid()})
	if err := a.send(msgHello, 0, hello); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	var buf []byte
	for {
		var f frame
		var err error
		f, buf, err = readFrame(a.in, buf)
		if err != nil {
			a.killAll(syscall.SIGKILL, true)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read frame: %w", err)
		}
		a.handle(f)
	}
}

// spareThreads is how many OS threads the agent creates up front. A fork
// bomb can use up the sandbox's pids limit; the Go runtime cannot then
// create a thread when it needs one and aborts, which would take the whole
// sandbox down. Threads the runtime has once created stay parked for reuse.
const spareThreads = 8

// reserveThreads makes the runtime create n OS threads and park them.
func reserveThreads(n int) {
	var ready, done sync.WaitGroup
	ready.Add(n)
	done.Add(n)
	release := make(chan struct{})
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			// Locked goroutines each hold their own thread; unlocking
			// before exit returns the thread to the idle pool instead of
			// destroying it.
			goruntime.LockOSThread()
			ready.Done()
			<-release
			goruntime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}

func (a *Agent) send(typ byte, id uint32, payload []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return writeFrame(a.out, typ, id, payload)
}

func (a *Agent) sendJSON(typ byte, id uint32, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		a.log.Error("marshal reply", "err", err)
		return
	}
	if err := a.send(typ, id, b); err != nil {
		a.log.Error("send reply", "err", err)
	}
}

func (a *Agent) fail(id uint32, err error) {
	a.sendJSON(msgError, id, errorReply{Message: err.Error()})
}

func (a *Agent) handle(f frame) {
	switch f.typ {
	case msgStart:
		var req StartRequest
		if err := json.Unmarshal(f.payload, &req); err != nil {
			a.fail(f.id, fmt.Errorf("decode start: %w", err))
			return
		}
		pid, err := a.start(f.id, req)
		if err != nil {
			a.fail(f.id, err)
			return
		}
		if pid != 0 { // otherwise the reply comes when the zygote answers
			a.sendJSON(msgStarted, f.id, startedReply{PID: pid})
		}
	case msgStdin, msgCloseStdin:
		p := a.byID(f.id)
		if p == nil || p.stdin == nil {
			return
		}
		if f.typ == msgCloseStdin {
			p.stdin.Close()
			return
		}
		// A program that stops reading its stdin must not stall the agent.
		if _, err := p.stdin.Write(f.payload); err != nil {
			p.stdin.Close()
		}
	case msgSignal:
		var req signalRequest
		if err := json.Unmarshal(f.payload, &req); err != nil {
			a.fail(f.id, fmt.Errorf("decode signal: %w", err))
			return
		}
		sig := syscall.Signal(req.Signal)
		if req.All {
			a.killAll(sig, false)
		} else if p := a.byID(f.id); p != nil {
			_ = syscall.Kill(-p.pid, sig)
			_ = syscall.Kill(p.pid, sig)
		}
		a.send(msgOK, f.id, nil)
	case msgFileBegin:
		var h fileHeader
		if err := json.Unmarshal(f.payload, &h); err != nil {
			a.fail(f.id, fmt.Errorf("decode file header: %w", err))
			return
		}
		file, err := createFile(h)
		if err != nil {
			a.fail(f.id, err)
			return
		}
		a.files[f.id] = file
	case msgFileData:
		file := a.files[f.id]
		if file == nil {
			return
		}
		if _, err := file.Write(f.payload); err != nil {
			file.Close()
			delete(a.files, f.id)
			a.fail(f.id, fmt.Errorf("write %s: %w", file.Name(), err))
		}
	case msgFileEnd:
		file := a.files[f.id]
		if file == nil {
			return // already failed
		}
		delete(a.files, f.id)
		if err := file.Close(); err != nil {
			a.fail(f.id, fmt.Errorf("close %s: %w", file.Name(), err))
			return
		}
		a.send(msgOK, f.id, nil)
	case msgReset:
		var req ResetRequest
		if err := json.Unmarshal(f.payload, &req); err != nil {
			a.fail(f.id, fmt.Errorf("decode reset: %w", err))
			return
		}
		// Answered from a goroutine: pinging zygotes takes a round trip.
		go func() {
			if err := a.reset(req); err != nil {
				a.fail(f.id, err)
				return
			}
			a.send(msgOK, f.id, nil)
		}()
	case msgForward:
		var req ForwardRequest
		if err := json.Unmarshal(f.payload, &req); err != nil {
			a.fail(f.id, fmt.Errorf("decode forward: %w", err))
			return
		}
		if err := a.forward(req); err != nil {
			a.fail(f.id, err)
			return
		}
		a.send(msgOK, f.id, nil)
	case msgFileRead, msgList, msgRemove:
		var req pathRequest
		if err := json.Unmarshal(f.payload, &req); err != nil {
			a.fail(f.id, fmt.Errorf("decode path: %w", err))
			return
		}
		if err := checkPath(req.Path); err != nil && req.Path != "/workspace" {
			a.fail(f.id, err)
			return
		}
		switch f.typ {
		case msgFileRead:
			// Streamed from a goroutine: a large file must not stall the
			// control stream's reader.
			go a.readFile(f.id, req.Path)
		case msgList:
			entries, err := list(req.Path)
			if err != nil {
				a.fail(f.id, err)
				return
			}
			a.sendJSON(msgOK, f.id, entries)
		case msgRemove:
			if err := os.RemoveAll(req.Path); err != nil {
				a.fail(f.id, fmt.Errorf("remove: %w", err))
				return
			}
			a.send(msgOK, f.id, nil)
		}
	default:
		a.fail(f.id, fmt.Errorf("frame type %d: %w", f.typ, ErrProtocol))
	}
}

// forward relays TCP connections on req.Listen to the unix socket
// req.Socket, for as long as the agent lives.
func (a *Agent) forward(req ForwardRequest) error {
	l, err := net.Listen("tcp", req.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", req.Listen, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("unix", req.Socket)
				if err != nil {
					a.log.Warn("egress proxy unreachable", "err", err)
					return
				}
				defer u.Close()
				done := make(chan struct{})
				go func() {
					io.Copy(u, c)
					if uc, ok := u.(*net.UnixConn); ok {
						uc.CloseWrite()
					}
					close(done)
				}()
				io.Copy(c, u)
				c.Close()
				<-done
			}()
		}
	}()
	return nil
}

// readFile streams a regular file to the host. It runs as the sandbox
// user in the sandbox's own view of the file system: a link resolves where
// the program could have gone anyway.
func (a *Agent) readFile(id uint32, p string) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		a.fail(id, fmt.Errorf("open: %w", err))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		a.fail(id, fmt.Errorf("%s is not a regular file", p))
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

func list(dir string) ([]Entry, error) {
	d, err := os.Open(dir)
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
		e := Entry{Name: fi.Name(), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), ModTime: fi.ModTime().UTC(), Type: "other"}
		switch {
		case fi.IsDir():
			e.Type, e.Dir = "dir", true
		case fi.Mode()&os.ModeSymlink != 0:
			e.Type = "symlink"
		case fi.Mode().IsRegular():
			e.Type = "file"
		}
		out = append(out, e)
	}
	return out, nil
}

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
		return 0, errors.New("start: empty argv")
	}
	if req.Via != 0 && req.Zygote {
		return 0, errors.New("start: a zygote cannot be started through a zygote")
	}
	var z *zygote
	path := req.Argv[0]
	if req.Via != 0 {
		if z = a.zygote(req.Via); z == nil {
			return 0, fmt.Errorf("start: no zygote %d", req.Via)
		}
	} else {
		var err error
		if path, err = lookPath(req.Argv[0], req.Env); err != nil {
			return 0, err
		}
	}
	p := &proc{id: id, persistent: req.Persistent || req.Zygote, exited: make(chan struct{})}
	io, err := a.stdio(p, req.Stdin, req.StatusFD && !req.Zygote)
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
		Sys:   &syscall.SysProcAttr{Setsid: true},
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
		z := a.newZygote(id, p, zs)
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
		r, w, err := os.Pipe()
		if err != nil {
			io.closeChild()
			io.closeParent(p)
			return nil, fmt.Errorf("output pipe: %w", err)
		}
		io.child = append(io.child, w)
		io.readers = append(io.readers, r)
		io.types = append(io.types, typ)
	}
	return io, nil
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
	go a.finish(p)
}

// pump copies one output stream of p into frames until EOF.
func (a *Agent) pump(p *proc, typ byte, r *os.File) {
	defer p.readers.Done()
	defer r.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if err := a.send(typ, p.id, buf[:n]); err != nil {
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

// finish waits for p to exit, ends what it left behind, waits for its output
// to drain and reports its exit.
func (a *Agent) finish(p *proc) {
	<-p.exited
	if !p.persistent {
		p.status.Reaped = a.killAll(syscall.SIGKILL, false)
	}
	p.readers.Wait()
	if p.stdin != nil {
		p.stdin.Close()
	}
	a.mu.Lock()
	delete(a.procs, p.pid)
	a.mu.Unlock()
	a.sendJSON(msgExit, p.id, p.status)
}

// reap collects every exited child; the agent is the namespace's init, so
// orphans of every program end up here.
func (a *Agent) reap() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		var st ExitStatus
		switch {
		case ws.Exited():
			st = ExitStatus{Code: ws.ExitStatus()}
		case ws.Signaled():
			st = ExitStatus{Code: -1, Signal: int(ws.Signal())}
		default:
			continue // stopped or continued
		}
		p, ok := a.procs[pid]
		if !ok {
			// A zygote's child is the agent's once its parent has
			// exited, possibly before the zygote told us its pid.
			if len(a.orphans) < maxOrphans {
				a.orphans[pid] = st
			}
			delete(a.spares, pid)
			continue
		}
		p.status = st
		select {
		case <-p.exited:
		default:
			close(p.exited)
		}
	}
}

// killAll sends sig to every process in the sandbox but the agent and, unless
// includePersistent, persistent processes. It returns how many it signalled.
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
		pids := listPIDs()
		hit := 0
		for _, pid := range pids {
			if keep[pid] {
				continue
			}
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
		if len(keep) == 1 {
			// Nothing to spare: kill(-1) cannot race with fork.
			_ = syscall.Kill(-1, sig)
		}
	}
	return n
}

// listPIDs returns the live processes of the sandbox, zombies excluded.
func listPIDs() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// The state follows the last ')' of the command name.
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
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
	return "", fmt.Errorf("start: %s not found in PATH", name)
}

// writableRoots are where the host may place files.
var writableRoots = []string{"/workspace", "/tmp"}

func checkPath(p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("path %q is not absolute and clean", p)
	}
	for _, root := range writableRoots {
		if strings.HasPrefix(p, root+"/") {
			return nil
		}
	}
	return fmt.Errorf("path %q is outside %v", p, writableRoots)
}

func createFile(h fileHeader) (*os.File, error) {
	if err := checkPath(h.Path); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(h.Path), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(h.Path), err)
	}
	mode := os.FileMode(h.Mode & 0o777)
	if mode == 0 {
		mode = 0o644
	}
	f, err := os.OpenFile(h.Path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", h.Path, err)
	}
	return f, nil
}

// clearDir removes everything inside dir, including entries a program made
// unwritable to itself.
func clearDir(dir string) error {
	if err := checkPath(dir + "/x"); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("clear %s: %w", dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			_ = filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
				if d != nil && d.IsDir() {
					_ = os.Chmod(q, 0o700)
				}
				return nil
			})
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("clear %s: %w", dir, err)
			}
		}
	}
	return nil
}
