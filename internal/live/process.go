package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/stream"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// Processes of a live sandbox run persistent in its agent: no execution's
// end reaps them, they live until they exit or the sandbox ends. Each
// one's output goes to a buffer on this node (the sandbox's owner) that
// keeps the latest Config.OutputBuffer bytes: a client that connects late,
// or a second client, reads what is buffered and then what comes.

// Bounds of a process request.
const (
	maxArgv      = 4096
	maxArgvBytes = 256 << 10
	// maxArg is the kernel's bound of one argument (MAX_ARG_STRLEN, 32
	// pages, its NUL included): a longer one fails the exec with E2BIG.
	maxArg = 128<<10 - 1
	maxTag = 256
)

// Process is the handle of one process of a live sandbox.
type Process struct {
	sb  *Sandbox
	out *output

	// Guarded by out.mu:
	p           *agent.Process // its handle; a resume gives it a new one
	info        sandbox.ProcessInfo
	stdinClosed bool
	// moved is set while a pause with memory is under way: p's end then
	// means the sandbox was saved, and the resume closes moved (pause.go).
	moved chan struct{}
	// endReason is the exit's error when p ends with its sandbox.
	endReason string
	// exit is how it ended, once it has.
	exit *Exit

	// audit records its end for whoever started it; stdinBytes counts
	// what was written to its stdin (a PTY's input), which the end
	// reports.
	audit      audit.Scope
	stdinBytes atomic.Int64
}

// output is a process's event log: its start, its output as it came
// (the latest bytes of it, up to a bound) and its end. It is safe for
// concurrent use; it implements agent.Output.
type output struct {
	mu     sync.Mutex
	max    int64
	events []sandbox.ProcessEvent // start, then output and end, by Seq
	size   int64                  // Data bytes in events
	next   uint64
	// dropped counts output bytes dropped to keep size under max, the
	// last of them in event lastDropped.
	dropped     int64
	lastDropped uint64
	ended       bool
	// changed is closed, and replaced, when an event arrives.
	changed chan struct{}
	proc    *Process
}

func newOutput(max int64) *output {
	// Seq 1 is the start event, added once the pid is known; output that
	// comes before (the agent may send it before its answer) follows it.
	return &output{max: max, next: 2, changed: make(chan struct{})}
}

func (o *output) addLocked(ev sandbox.ProcessEvent) {
	if ev.Type == sandbox.ProcessEventStart {
		ev.Seq = 1
		o.events = slices.Insert(o.events, 0, ev)
	} else {
		ev.Seq = o.next
		o.next++
		o.events = append(o.events, ev)
	}
	o.size += int64(len(ev.Data))
	o.trimLocked()
	close(o.changed)
	o.changed = make(chan struct{})
}

// trimLocked drops the oldest output until the buffer holds at most max
// bytes.
func (o *output) trimLocked() {
	for o.size > o.max {
		// Drop the oldest output (never the start event).
		i := slices.IndexFunc(o.events, func(e sandbox.ProcessEvent) bool { return len(e.Data) > 0 })
		if i < 0 {
			break
		}
		d := o.events[i]
		o.size -= int64(len(d.Data))
		o.dropped += int64(len(d.Data))
		o.lastDropped = d.Seq
		o.events = slices.Delete(o.events, i, i+1)
	}
}

func (o *output) write(typ string, p []byte) {
	b := slices.Clone(p) // the agent client reuses its buffer
	o.mu.Lock()
	defer o.mu.Unlock()
	o.addLocked(sandbox.ProcessEvent{Type: typ, Data: b})
}

// Stdout implements agent.Output.
func (o *output) Stdout(p []byte) { o.write(sandbox.ProcessEventStdout, p) }

// Stderr implements agent.Output.
func (o *output) Stderr(p []byte) { o.write(sandbox.ProcessEventStderr, p) }

// Status implements agent.Output; processes have no status pipe.
func (o *output) Status([]byte) {}

// Events returns the events after seq after (0: all there are), a channel
// closed when more come, and whether the process has ended (then nothing
// more comes). When output after after was dropped from the buffer, the
// first event is a dropped event that says how much. Text is set on
// output events.
func (o *output) Events(after uint64) ([]sandbox.ProcessEvent, <-chan struct{}, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []sandbox.ProcessEvent
	if o.dropped > 0 && after < o.lastDropped {
		out = append(out, sandbox.ProcessEvent{Seq: o.lastDropped, Type: sandbox.ProcessEventDropped, Dropped: o.dropped})
	}
	for _, ev := range o.events {
		if ev.Seq <= after || (ev.Seq <= o.lastDropped && ev.Type != sandbox.ProcessEventStart) {
			continue
		}
		if len(ev.Data) > 0 {
			ev.Text = strings.ToValidUTF8(string(ev.Data), "\uFFFD")
		}
		out = append(out, ev)
	}
	// The start event comes first even when later output was dropped.
	slices.SortStableFunc(out, func(a, b sandbox.ProcessEvent) int {
		return boolInt(a.Type != sandbox.ProcessEventStart) - boolInt(b.Type != sandbox.ProcessEventStart)
	})
	return out, o.changed, o.ended
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// endedKeep is how much of an ended process's output stays buffered: its
// readers have had their chance, and a sandbox keeps many ended ones.
const endedKeep = 64 << 10

// end records the process's end; its buffer shrinks to endedKeep.
func (o *output) end(x Exit) {
	o.mu.Lock()
	defer o.mu.Unlock()
	exit := x.Wire()
	o.proc.info.Running = false
	o.proc.info.Exit = &exit
	o.proc.exit = &x
	o.ended = true
	o.max = min(o.max, endedKeep)
	o.addLocked(sandbox.ProcessEvent{Type: sandbox.ProcessEventEnd, Exit: &exit})
}

// checkProcess validates a start request.
func checkProcess(req *sandbox.StartProcessRequest) error {
	bad := func(field, msg string) error { return validate.Refuse(field, "%s", msg) }
	switch {
	case len(req.Cmd) > 0 && req.Shell != "":
		return bad("cmd", "give cmd or shell, not both")
	case len(req.Cmd) == 0 && req.Shell == "":
		return bad("cmd", "give cmd (an argv) or shell (a command line)")
	case len(req.Tag) > maxTag:
		return bad("tag", fmt.Sprintf("is longer than %d bytes", maxTag))
	case req.PTY != nil && (req.PTY.Cols == 0 || req.PTY.Rows == 0):
		return bad("pty", "give cols and rows (1-65535)")
	}
	if req.PTY != nil {
		req.Stdin = true // the terminal
	}
	if req.Shell != "" {
		req.Cmd = []string{"/bin/bash", "-l", "-c", req.Shell}
	}
	if len(req.Cmd) > maxArgv {
		return bad("cmd", fmt.Sprintf("has %d arguments; the limit is %d", len(req.Cmd), maxArgv))
	}
	total := 0
	for _, a := range req.Cmd {
		total += len(a)
		if len(a) > maxArg {
			return bad("cmd", fmt.Sprintf("has an argument of %d bytes; the limit is %d an argument (the kernel's)", len(a), maxArg))
		}
		if !utf8.ValidString(a) || strings.ContainsRune(a, 0) {
			return bad("cmd", "arguments are UTF-8 without NUL bytes")
		}
	}
	if total > maxArgvBytes || req.Cmd[0] == "" {
		return bad("cmd", fmt.Sprintf("must name a program and hold at most %d bytes", maxArgvBytes))
	}
	if req.Cwd == "" {
		req.Cwd = "/workspace"
	}
	if req.User != "" && !validUser(req.User) {
		return bad("user", "name a user of the sandbox: lower-case letters, digits, '_' and '-', at most 32")
	}
	if err := validate.CheckAbsPath(req.Cwd); err != nil {
		return bad("cwd", err.Error())
	}
	if err := validate.CheckEnv(req.Env); err != nil {
		return err
	}
	return nil
}

// start starts a process in the sandbox (Start).
func (s *Sandbox) start(ctx context.Context, req sandbox.StartProcessRequest) (*Process, error) {
	m := s.m
	if err := checkProcess(&req); err != nil {
		return nil, err
	}
	if _, err := m.Get(s.tenant, s.id); err != nil {
		return nil, err
	}
	sb, err := s.held(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.sb != sb {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the sandbox ended", ErrNotFound)
	}
	running := 0
	for _, p := range s.procs {
		if !p.out.Ended() {
			running++
		}
	}
	env := maps.Clone(s.env)
	s.mu.Unlock()
	if running >= m.cfg.MaxProcesses {
		return nil, ErrTooMany
	}
	if req.User != "" && req.User != "user" {
		// Another user's: the agent sets them from its passwd entry.
		for k, v := range userEnv {
			if env[k] == v {
				delete(env, k)
			}
		}
	}
	maps.Copy(env, req.Env)
	out := newOutput(m.cfg.OutputBuffer)
	// Not cut short by the client: a process the agent started must be
	// known here, or nothing could reach it.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	start := agent.StartRequest{Argv: req.Cmd, Dir: req.Cwd, Stdin: req.Stdin, Persistent: true, User: req.User}
	if req.PTY != nil {
		start.PTY = &agent.PTYSize{Cols: req.PTY.Cols, Rows: req.PTY.Rows}
		if _, ok := env["TERM"]; !ok {
			env["TERM"] = "xterm-256color"
		}
	}
	start.Env = sortedEnv(env)
	p, err := sb.Agent().Start(sctx, start, out)
	if err != nil {
		var re *agent.RemoteError
		if errors.As(err, &re) && (errors.Is(re, syscall.ENOENT) || errors.Is(re, syscall.EACCES) || errors.Is(re, syscall.ENOTDIR)) {
			return nil, validate.Refuse("cmd", "the program, or the working directory, does not exist in the sandbox or may not be run")
		}
		return nil, fmt.Errorf("start a process in %s: %w", s.w.Key(), err)
	}
	started := m.table.Now().UTC()
	proc := &Process{sb: s, p: p, out: out, audit: audit.From(ctx), info: sandbox.ProcessInfo{PID: p.PID, Tag: req.Tag, Cmd: req.Cmd, Cwd: req.Cwd,
		Stdin: req.Stdin, PTY: req.PTY, Running: true, StartedAt: started}}
	out.mu.Lock()
	out.proc = proc
	out.addLocked(sandbox.ProcessEvent{Type: sandbox.ProcessEventStart, PID: p.PID})
	out.mu.Unlock()
	s.mu.Lock()
	if old, ok := s.procs[p.PID]; ok && old.out.Ended() {
		// The pid was reused: the ended process's record goes.
		s.ended = slices.DeleteFunc(s.ended, func(pid int) bool { return pid == p.PID })
	}
	s.procs[p.PID] = proc
	s.mu.Unlock()
	// Owned by the process: it ends when the process does, or when its
	// sandbox goes (the agent's stream ends every process).
	go s.watch(proc, started)
	return proc, nil
}

// watch waits for proc's end, across pauses, records it, and keeps the
// ended processes listed within Config.KeepEnded.
func (s *Sandbox) watch(proc *Process, started time.Time) {
	m := s.m
	st, werr := proc.wait()
	x := Exit{Code: st.Code, Signal: syscall.Signal(st.Signal)}
	if werr != nil {
		x = Exit{Code: -1, Ended: exitSandboxEnded}
	}
	if by := proc.endedBy(); by != "" {
		// Ended by a pause that could not keep it (killed, or lost).
		x.Ended = by
	}
	x.At = m.table.Now().UTC()
	x.Duration = x.At.Sub(started)
	proc.out.end(x)
	proc.audit.Record(endEvent(s, proc, x))
	s.mu.Lock()
	s.endedLocked(proc)
	s.mu.Unlock()
}

// endedLocked lists proc, which has ended, among the ended processes,
// dropping the oldest beyond Config.KeepEnded (s.mu is held).
func (s *Sandbox) endedLocked(proc *Process) {
	pid := proc.PID()
	if s.procs[pid] != proc {
		return
	}
	s.ended = append(s.ended, pid)
	for len(s.ended) > s.m.cfg.KeepEnded {
		delete(s.procs, s.ended[0])
		s.ended = s.ended[1:]
	}
}

// Ended reports whether the process has ended.
func (o *output) Ended() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended
}

func sortedEnv(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}

// Process returns the sandbox's process pid.
func (s *Sandbox) Process(pid int) (*Process, error) {
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs[pid]
	if !ok {
		return nil, fmt.Errorf("process %d: %w", pid, ErrNoProcess)
	}
	return p, nil
}

// Processes returns the sandbox's processes: those running and the latest
// that ended, by pid.
func (s *Sandbox) Processes() ([]*Process, error) {
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return nil, err
	}
	s.mu.Lock()
	procs := slices.Collect(maps.Values(s.procs))
	s.mu.Unlock()
	slices.SortFunc(procs, func(a, b *Process) int { return a.PID() - b.PID() })
	return procs, nil
}

// PID is the process's id in the sandbox.
func (p *Process) PID() int { return p.info.PID } // never changes

// Info describes the process.
func (p *Process) Info() sandbox.ProcessInfo {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	info := p.info
	if info.Exit != nil {
		x := *info.Exit
		info.Exit = &x
	}
	return info
}

// Exit is how the process ended; false while it runs.
func (p *Process) Exit() (Exit, bool) {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	if p.exit == nil {
		return Exit{}, false
	}
	return *p.exit, true
}

// Events returns the process's events after seq after (0: all there
// are), a channel closed when more come, and whether the process has
// ended (then nothing more comes). When output after after was dropped
// from the buffer, the first event is a dropped event that says how much.
// Text is set on output events.
func (p *Process) Events(after uint64) ([]sandbox.ProcessEvent, <-chan struct{}, bool) {
	return p.out.Events(after)
}

// Follow is the process's event log as a stream's source: the events
// after seq after (0: all there are), then each as it comes, until its
// end event.
func (p *Process) Follow(after uint64) stream.Source[sandbox.ProcessEvent] {
	read := func(after uint64) ([]sandbox.ProcessEvent, <-chan struct{}, bool) {
		// A client following a process is a call of its sandbox as long
		// as it follows (each wait of the stream reads again).
		p.sb.touch()
		return p.out.Events(after)
	}
	return stream.Log(read, func(ev sandbox.ProcessEvent) uint64 { return ev.Seq }, after)
}

// Wait describes the process once it has ended (or ctx has).
func (p *Process) Wait(ctx context.Context) (sandbox.ProcessInfo, error) {
	for {
		_, changed, ended := p.out.Events(^uint64(0))
		if ended {
			return p.Info(), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return sandbox.ProcessInfo{}, ctx.Err()
		}
	}
}

// active checks that the process may be acted on: its sandbox is there,
// not paused (resumed first if it wakes on a call: autopause.go).
func (p *Process) active(ctx context.Context) error {
	s := p.sb
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return err
	}
	s.touch()
	if s.paused() {
		if !s.wakes() {
			return ErrPaused
		}
		return s.wake(ctx)
	}
	return nil
}

// DefaultStdinStall is how long a write to a process's stdin waits while
// the process takes none of it, when Config.StdinStall is zero. A program
// that reads its input pauses far less between reads (a GC, a busy host, a
// slow step of its own); a caller waits less than the 30 to 60 s after
// which its HTTP client, a proxy or E2B's SDKs give up on a call, so it
// hears why instead of a timeout of its own.
const DefaultStdinStall = 10 * time.Second

func (m *Manager) stdinStall() time.Duration {
	if m.cfg.StdinStall > 0 {
		return m.cfg.StdinStall
	}
	return DefaultStdinStall
}

// WriteStdin copies r to the process's stdin until r ends; it returns how
// many bytes it wrote. Memory stays bounded whatever r's size: a buffer
// here, and the agent's window (agent.StdinWindow). A process that takes
// none of its stdin for Config.StdinStall ends the write with a
// *NotReadingError (ErrNotReading); the bytes counted reach the process,
// in order, if it reads, and nothing more of r was taken.
func (p *Process) WriteStdin(ctx context.Context, r io.Reader) (int64, error) {
	if err := p.active(ctx); err != nil {
		return 0, err
	}
	if err := p.writable(); err != nil {
		return 0, err
	}
	stall := p.sb.m.stdinStall()
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, rerr := r.Read(buf)
		if k > 0 {
			w, err := p.handle().WriteStdinWithin(ctx, buf[:k], stall)
			n += int64(w)
			p.stdinBytes.Add(int64(w))
			switch {
			case errors.Is(err, agent.ErrNotReading):
				return n, &NotReadingError{Written: n, Stall: stall}
			case errors.Is(err, agent.ErrStdinEnded), errors.Is(err, agent.ErrStdinClosed):
				return n, fmt.Errorf("write stdin: %w: %w", ErrEnded, err)
			case errors.Is(err, agent.ErrNoStdin):
				return n, fmt.Errorf("write stdin: %w: %w", ErrNoStdin, err)
			case err != nil:
				return n, fmt.Errorf("write stdin: %w", err)
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
	}
}

func (p *Process) writable() error {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	switch {
	case !p.info.Stdin:
		return ErrNoStdin
	case !p.info.Running || p.stdinClosed:
		return ErrEnded
	}
	return nil
}

// CloseStdin closes the process's stdin (it reads EOF).
func (p *Process) CloseStdin() error {
	ctx, cancel := context.WithTimeout(context.Background(), wakeWait)
	defer cancel()
	if err := p.active(ctx); err != nil {
		return err
	}
	if err := p.writable(); err != nil {
		return err
	}
	p.out.mu.Lock()
	p.stdinClosed = true
	p.out.mu.Unlock()
	return p.handle().CloseStdin()
}

// ParseSignal reads a signal given by name ("SIGTERM", "term") or number.
func ParseSignal(s string) (syscall.Signal, error) {
	s = strings.TrimSpace(s)
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s {
		if n < 1 || n > 64 {
			return 0, workspace.Invalid("signal %d is not between 1 and 64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	if sig == 0 {
		return 0, workspace.Invalid("unknown signal %q", s)
	}
	return sig, nil
}

// Signal sends sig to the process and its process group.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	if err := p.active(ctx); err != nil {
		return err
	}
	if p.out.Ended() {
		return ErrEnded
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.handle().Signal(ctx, sig)
}

// Resize changes the size of the process's terminal (started with a PTY).
func (p *Process) Resize(ctx context.Context, size sandbox.PTYSize) error {
	if size.Cols == 0 || size.Rows == 0 {
		return validate.Refuse("cols", "give cols and rows (1-65535)")
	}
	if err := p.active(ctx); err != nil {
		return err
	}
	p.out.mu.Lock()
	tty, running := p.info.PTY != nil, p.info.Running
	p.out.mu.Unlock()
	switch {
	case !tty:
		return ErrNoTerminal
	case !running:
		return ErrEnded
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := p.handle().Resize(ctx, size.Cols, size.Rows)
	var re *agent.RemoteError
	if errors.As(err, &re) && errors.Is(re, syscall.ESRCH) {
		return ErrEnded
	}
	if err == nil {
		p.out.mu.Lock()
		p.info.PTY = &size
		p.out.mu.Unlock()
	}
	return err
}

// validUser says whether name can be a user's name (useradd's default
// rule): the agent looks it up in the sandbox's /etc/passwd.
func validUser(name string) bool {
	if len(name) > 32 || name == "" || name[0] == '-' || (name[0] >= '0' && name[0] <= '9') {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
