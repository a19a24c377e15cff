//go:build linux

package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	goruntime "runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Agent is PID 1 of a sandbox. It starts processes on the host's request,
// streams their output back, reaps every zombie and, when a process ends,
// kills what that process left behind.
//
// It runs with the sandbox's unprivileged uid and no capabilities or, in a
// system sandbox (a live sandbox), as the sandbox's root, running processes
// and file operations as the sandbox's users (users.go). It marks itself
// non-dumpable so that programs in the sandbox cannot read its memory,
// environment or file descriptors through /proc.
//
// This file is its start-up; dispatch.go reads the host's frames,
// process.go runs processes, stdin.go writes their stdin, pty.go gives them
// terminals, files.go places and reads files, fileops.go stats, lists,
// makes and moves them, watch.go reports changes in directories,
// forward.go relays TCP to the host, tunnel.go relays the host's
// connections to the sandbox's ports, zygote.go talks to zygotes, reset.go
// (and reset_live.go) returns a pooled sandbox to a clean state.
type Agent struct {
	in  io.Reader
	log *slog.Logger
	// local: the agent runs as an ordinary process whose sandbox is root
	// and its own descendants (local.go), not as a sandbox's PID 1.
	local bool
	root  string
	// uid is the agent's own; users: it is root and runs processes and
	// file operations as the sandbox's users, and places files anywhere
	// but the kernel's and Corral's own places (users.go, fileops.go).
	uid   int
	users bool

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
	files  map[uint32]*upload
	// watches are the host's directory watches (watch.go).
	watches watchSet
	// tunnels are the host's connections to the sandbox's ports
	// (tunnel.go).
	tunnels tunnelSet
	// resume is the state of suspending (resume.go); only the goroutine
	// that reads the control stream touches it.
	resume resumeState
	// baseline is the agent's scheduling and resource limits at start,
	// which every process inherits; a reset checks they are unchanged.
	baseline integrity
}

// Serve runs the agent as PID 1 of a sandbox until the host closes the
// control stream. in and out are the stream; log receives diagnostics (the
// sandbox's stderr). It refuses to run as any other PID: ErrNotInit.
func Serve(in io.Reader, out io.Writer, log *slog.Logger) error {
	return newAgent(in, out, log).serve()
}

func newAgent(in io.Reader, out io.Writer, log *slog.Logger) *Agent {
	uid := os.Getuid()
	return &Agent{in: in, out: out, log: log, procs: map[int]*proc{}, files: map[uint32]*upload{},
		orphans: map[int]ExitStatus{}, zygotes: map[uint32]*zygote{}, spares: map[int]bool{},
		uid: uid, users: uid == 0}
}

// Main runs the agent on the process's stdin and stdout with the command
// line args (those after the program's name and an "agent" subcommand),
// and returns the exit status. No arguments: a sandbox's PID 1 (Serve),
// which is how every runtime starts it. "local ROOT": an ordinary process
// for tests (ServeLocal), which only a caller that means it asks for;
// "local-system ROOT" the same as a system sandbox's agent (ServeLocal).
func Main(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	switch {
	case len(args) == 0:
		err = Serve(os.Stdin, os.Stdout, log)
	case len(args) == 2 && args[0] == "local":
		err = ServeLocal(os.Stdin, os.Stdout, log, args[1], false)
	case len(args) == 2 && args[0] == "local-system":
		err = ServeLocal(os.Stdin, os.Stdout, log, args[1], true)
	default:
		fmt.Fprintln(os.Stderr, "corral agent is started by corral inside a sandbox, not by hand (tests: agent local ROOT)")
		return 2
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "corral agent: %v\n", err)
		return 1
	}
	return 0
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
	if a.local {
		// An ordinary process: orphans of its programs are its to reap
		// (the zygote's children are orphans by design), and signals end
		// it as they would any process.
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("become child subreaper: %w", err)
		}
	} else {
		if os.Getpid() != 1 {
			return ErrNotInit
		}
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return fmt.Errorf("set non-dumpable: %w", err)
		}
		// Handled, not ignored: an ignored signal stays ignored across
		// exec, and programs must start with every signal at its default.
		shield := make(chan os.Signal, 16)
		signal.Notify(shield, ignoredSignals...)
		go func() {
			for range shield {
			}
		}()
	}
	// Whatever the runtime passed beyond stdio must not reach programs.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	reserveThreads(spareThreads)
	a.baseline = readIntegrity()
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	go func() {
		for range sigchld {
			a.reap()
		}
	}()

	hello, _ := json.Marshal(Hello{Version: Version, PID: os.Getpid(), UID: a.uid, Users: a.users})
	if err := a.send(msgHello, 0, hello); err != nil {
		return fmt.Errorf("send hello: %w", err)
	}
	// Buffered: a frame's header and payload (or several small frames) in
	// one read instead of one each.
	in := bufio.NewReader(a.in)
	var buf []byte
	for {
		var f frame
		var err error
		f, buf, err = readFrame(in, buf)
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
	a.sendJSON(msgError, id, errorReply{Kind: kindOf(err), Message: err.Error()})
}
