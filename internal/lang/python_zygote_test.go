//go:build linux

package lang_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/testenv"
)

// hostPython runs the zygote in these tests, outside any sandbox.
const hostPython = testenv.HostPython

// zygoteTimeout bounds every wait on the zygote or a process it forked, so
// that a broken zygote fails the test instead of hanging it.
const zygoteTimeout = 30 * time.Second

func needPython(t testing.TB) {
	t.Helper()
	testenv.NeedPython(t)
}

// zygoteSource returns the zygote script and the python wrapper it compiles,
// as the pool starts them.
func zygoteSource(t testing.TB) (zygote, wrapper string) {
	t.Helper()
	r, ok := lang.Get("python")
	if !ok {
		t.Fatal("no python runner")
	}
	z, ok := r.(lang.Zygoter)
	if !ok {
		t.Fatal("the python runner has no zygote")
	}
	step := z.ZygoteStep(nil)
	return step.Argv[2], step.Argv[3]
}

// zygoteProc is a zygote started as the agent starts one (a control socket
// on fd 3), and the spare it last handed over.
type zygoteProc struct {
	cmd *exec.Cmd
	// exited are the wait statuses of the zygote's children it reported
	// ({"exited": pid, "status": s}), by pid.
	exited  map[int]syscall.WaitStatus
	ctl     int // our end of the control socket
	env     []string
	wrapper string
	spare   *spareProc
}

type spareProc struct {
	pid, fd int
}

// zygoteMsg is what the zygote says (internal/agent/proto.go).
type zygoteMsg struct {
	ID    uint32          `json:"id"`
	PID   int             `json:"pid"`
	Pong  uint32          `json:"pong"`
	Ready json.RawMessage `json:"ready"`
	Spare int             `json:"spare"`
	Error string          `json:"error"`
	// Exited, Status: a child the zygote reaped, and its wait status.
	Exited int `json:"exited"`
	Status int `json:"status"`
}

// startZygote starts the zygote. The test process becomes a subreaper, as
// the agent is the sandbox's init: the zygote's children are its own.
func startZygote(t testing.TB) *zygoteProc {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a subreaper: %v", err)
	}
	closeInheritedOnExec(t)
	src, wrapper := zygoteSource(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "zygote-ctl")
	defer theirs.Close()
	tv := unix.NsecToTimeval(zygoteTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fds[0], unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(t.TempDir(), "zygote.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stderr.Close() })
	// One environment for the zygote and every execution, as in a sandbox
	// (the interpreter reads some of it, HOME among them, as it starts).
	z := &zygoteProc{ctl: fds[0], wrapper: wrapper, exited: map[int]syscall.WaitStatus{}, env: []string{"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + t.TempDir(), "LANG=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0"}}
	z.cmd = exec.Command(hostPython, "-c", src, wrapper)
	z.cmd.Env = z.env
	z.cmd.Dir = "/"
	z.cmd.Stderr = stderr
	z.cmd.ExtraFiles = []*os.File{theirs}
	if err := z.cmd.Start(); err != nil {
		unix.Close(z.ctl)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		z.dropSpare(t)
		unix.Close(z.ctl) // the zygote exits when its control socket closes
		done := make(chan error, 1)
		go func() { done <- z.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("zygote: %v", err)
			}
		case <-time.After(zygoteTimeout):
			z.cmd.Process.Kill()
			<-done
			t.Errorf("the zygote did not exit when its control socket closed")
		}
		if b, _ := os.ReadFile(stderr.Name()); len(b) > 0 {
			t.Logf("zygote stderr: %s", b)
		}
	})
	var ready struct {
		Python  string   `json:"python"`
		Modules []string `json:"modules"`
		Failed  []string `json:"failed"`
	}
	m := z.recv(t)
	if err := json.Unmarshal(m.Ready, &ready); err != nil || ready.Python == "" {
		t.Fatalf("the zygote's first message after its spare is %+v, not ready", m)
	}
	if z.spare == nil {
		t.Fatal("the zygote was ready without a spare")
	}
	return z
}

// closeInheritedOnExec marks the fds this process inherited (not Go's own,
// which are close-on-exec already) close-on-exec, so that a fresh
// interpreter, the reference, has only the fds it is given, as in a sandbox.
func closeInheritedOnExec(t testing.TB) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// recv returns the zygote's next message other than a spare (which it
// keeps, dropping the one before, as the agent does).
func (z *zygoteProc) recv(t testing.TB) zygoteMsg {
	t.Helper()
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(z.ctl, buf, oob, 0)
		if errors.Is(err, unix.EINTR) {
			continue // a socket with a receive timeout is not restarted after a signal
		}
		if err != nil || n == 0 {
			t.Fatalf("read from the zygote: %d bytes, %v", n, err)
		}
		var fds []int
		if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range msgs {
				if r, err := unix.ParseUnixRights(&cm); err == nil {
					fds = append(fds, r...)
				}
			}
		}
		var m zygoteMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			t.Fatalf("the zygote said %q: %v", buf[:n], err)
		}
		if m.Exited > 0 {
			z.exited[m.Exited] = syscall.WaitStatus(m.Status)
			continue
		}
		if m.Spare == 0 {
			for _, fd := range fds {
				unix.Close(fd)
			}
			return m
		}
		if len(fds) != 1 {
			t.Fatalf("spare %d came with %d fds", m.Spare, len(fds))
		}
		unix.CloseOnExec(fds[0])
		z.dropSpare(t)
		z.spare = &spareProc{pid: m.Spare, fd: fds[0]}
	}
}

// dropSpare closes the unused spare's socket and reaps it (it exits).
func (z *zygoteProc) dropSpare(t testing.TB) {
	if z.spare == nil {
		return
	}
	unix.Close(z.spare.fd)
	z.reap(t, z.spare.pid)
	z.spare = nil
}

// reap waits for pid, a process the zygote forked, as the agent does: the
// zygote reaps its own children and says how each ended; where the kernel
// has no pidfds, the child's parent is an intermediate that exits, and then
// the child is the test's to wait for (the zygote may name a child before
// that, so until then the kernel says it is not ours: the agent, reaping
// every child as init, meets the same and keeps such statuses until it is
// told the pid).
func (z *zygoteProc) reap(t testing.TB, pid int) syscall.WaitStatus {
	t.Helper()
	deadline := time.Now().Add(zygoteTimeout)
	for {
		if ws, ok := z.exited[pid]; ok {
			delete(z.exited, pid)
			return ws
		}
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case err == nil && got == pid:
			return ws
		case err == nil, errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ECHILD):
			if time.Now().After(deadline) {
				t.Fatalf("process %d did not end within %v", pid, zygoteTimeout)
			}
			z.poll(t)
		default:
			t.Fatalf("wait for %d: %v", pid, err)
		}
	}
}

// poll takes in what the zygote says within a millisecond ({"exited": …}
// messages, and spares), for reap.
func (z *zygoteProc) poll(t testing.TB) {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(z.ctl), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 1); err != nil && !errors.Is(err, unix.EINTR) {
		t.Fatalf("poll the zygote: %v", err)
	} else if n == 0 {
		return
	}
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(z.ctl, buf, oob, unix.MSG_DONTWAIT)
	if err != nil || n == 0 {
		return
	}
	var fdsIn []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, cm := range msgs {
			if r, err := unix.ParseUnixRights(&cm); err == nil {
				fdsIn = append(fdsIn, r...)
			}
		}
	}
	var m zygoteMsg
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		t.Fatalf("the zygote said %q: %v", buf[:n], err)
	}
	switch {
	case m.Exited > 0:
		z.exited[m.Exited] = syscall.WaitStatus(m.Status)
	case m.Spare > 0 && len(fdsIn) == 1:
		unix.CloseOnExec(fdsIn[0])
		z.dropSpare(t)
		z.spare = &spareProc{pid: m.Spare, fd: fdsIn[0]}
	default:
		t.Fatalf("the zygote said %+v while the test waited for a process to end", m)
	}
}

// request is what the agent sends for an execution.
type request struct {
	ID       uint32   `json:"id,omitempty"`
	Argv     []string `json:"argv"`
	Env      []string `json:"env"`
	Dir      string   `json:"dir"`
	StatusFD bool     `json:"status_fd"`
}

// result is what an execution left: its streams, its status fd's bytes, how
// it ended, and what it wrote into its directory.
type result struct {
	Stdout, Stderr, Status string
	Exit                   string
	Files                  map[string]string
}

// execution is one program and how it is run: through the wrapper (CODE is
// main.py's source), or as raw `python3 -c CODE`.
type execution struct {
	code string
	raw  bool
}

func (e execution) argv(wrapper string) []string {
	if e.raw {
		return []string{"python3", "-c", e.code}
	}
	return []string{"python3", "-c", wrapper, "main.py"}
}

// newDir makes the execution's working directory, with main.py.
func newDir(t testing.TB, e execution) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(e.code), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pipes are an execution's stdio as the agent makes them: stdin /dev/null,
// pipes for stdout, stderr and the status fd.
type pipes struct {
	child   []*os.File
	readers []*os.File
}

func newPipes(t testing.TB) *pipes {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	p := &pipes{child: []*os.File{null}}
	for range 3 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p.child, p.readers = append(p.child, w), append(p.readers, r)
	}
	return p
}

func (p *pipes) fds() []int {
	fds := make([]int, len(p.child))
	for i, f := range p.child {
		fds[i] = int(f.Fd())
	}
	return fds
}

func (p *pipes) closeChild() {
	for _, f := range p.child {
		f.Close()
	}
}

// read reads the streams to their end (the process exiting ends them).
func (p *pipes) read(t testing.TB) (out [3]string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, r := range p.readers {
		wg.Go(func() {
			defer r.Close()
			r.SetReadDeadline(time.Now().Add(zygoteTimeout))
			b, err := io.ReadAll(r)
			out[i], errs[i] = string(b), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("read the execution's output: %v", err)
	}
	return out
}

func exitOf(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ws.ExitStatus())
}

func newResult(t testing.TB, out [3]string, exit, dir string) result {
	t.Helper()
	r := result{Stdout: out[0], Stderr: out[1], Status: out[2], Exit: exit, Files: map[string]string{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "main.py" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		r.Files[e.Name()] = string(b)
	}
	return r
}

// runFresh runs e as a process of its own, as the Run step would without a
// zygote: the agent starts it in a session of its own with the status fd
// on fd 3.
func runFresh(t testing.TB, z *zygoteProc, e execution) result {
	t.Helper()
	dir := newDir(t, e)
	p := newPipes(t)
	argv := e.argv(z.wrapper)
	cmd := exec.Command(hostPython, argv[1:]...)
	cmd.Env = z.env
	cmd.Dir = dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.child[0], p.child[1], p.child[2]
	cmd.ExtraFiles = p.child[3:]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.closeChild()
	out := p.read(t)
	cmd.Wait()
	return newResult(t, out, exitOf(cmd.ProcessState.Sys().(syscall.WaitStatus)), dir)
}

// runSpare sends e to the zygote's spare, as the agent does when there is
// one, then pings the zygote (the reset), which makes the next spare.
func runSpare(t testing.TB, z *zygoteProc, e execution) result {
	t.Helper()
	sp := z.spare
	if sp == nil {
		t.Fatal("no spare")
	}
	z.spare = nil
	dir := newDir(t, e)
	p := newPipes(t)
	b, _ := json.Marshal(request{ID: 1, Argv: e.argv(z.wrapper), Env: z.env, Dir: dir, StatusFD: true})
	err := unix.Sendmsg(sp.fd, b, unix.UnixRights(p.fds()...), nil, 0)
	unix.Close(sp.fd)
	p.closeChild()
	if err != nil {
		t.Fatalf("send to the spare: %v", err)
	}
	out := p.read(t)
	r := newResult(t, out, exitOf(z.reap(t, sp.pid)), dir)
	z.ping(t, 7)
	return r
}

// runForked sends e to the zygote itself, as the agent does when there is
// no spare: it forks a child and says which.
func runForked(t testing.TB, z *zygoteProc, e execution) result {
	t.Helper()
	dir := newDir(t, e)
	p := newPipes(t)
	b, _ := json.Marshal(request{ID: 2, Argv: e.argv(z.wrapper), Env: z.env, Dir: dir, StatusFD: true})
	err := unix.Sendmsg(z.ctl, b, unix.UnixRights(p.fds()...), nil, 0)
	p.closeChild()
	if err != nil {
		t.Fatalf("send to the zygote: %v", err)
	}
	m := z.recv(t)
	if m.ID != 2 || m.PID <= 1 || m.Error != "" {
		t.Fatalf("the zygote answered %+v", m)
	}
	out := p.read(t)
	return newResult(t, out, exitOf(z.reap(t, m.PID)), dir)
}

// ping pings the zygote, as a reset does, and expects its pong and a new
// spare.
func (z *zygoteProc) ping(t testing.TB, tag uint32) {
	t.Helper()
	b, _ := json.Marshal(map[string]uint32{"ping": tag})
	if err := unix.Sendmsg(z.ctl, b, nil, nil, 0); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if m := z.recv(t); m.Pong != tag || m.Error != "" {
		t.Fatalf("the zygote answered a ping with %+v", m)
	}
	if z.spare == nil {
		t.Fatal("no spare after a ping")
	}
}

// inspect prints what a program can see of the process it runs in.
const inspect = `import json, os, signal, sys
handlers = {}
for s in signal.valid_signals():
    try:
        handlers[int(s)] = str(signal.getsignal(s))
    except (OSError, ValueError):
        pass
print(json.dumps({
    'argv': sys.argv, 'name': __name__, 'file': __file__, 'cwd': os.getcwd(),
    'env': sorted(os.environ.items()), 'umask': os.umask(0o022),
    'session_leader': os.getsid(0) == os.getpid(), 'fds': sorted(os.listdir('/proc/self/fd')),
    'handlers': handlers, 'blocked': sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    'modules': sorted(sys.modules), 'main_names': sorted(vars(sys.modules['__main__'])),
    'meta_path': [getattr(f, '__qualname__', type(f).__qualname__) for f in sys.meta_path],
    'cpus': sorted(os.sched_getaffinity(0)),
}, sort_keys=True))
`

// exiting leaves what the interpreter's exit must finish: a thread to join,
// an atexit handler, an unclosed file and an object with a finalizer.
const exiting = `import atexit, threading
class Finalized:
    def __del__(self, print=print):
        print('finalized')
kept = Finalized()
f = open('unclosed.txt', 'w')
f.write('unclosed data')
atexit.register(lambda: print('atexit'))
go = threading.Event()
def later():
    go.wait()
    print('thread')
threading.Thread(target=later).start()
print('main')
go.set()
`

// TestPythonZygoteRunsLikeTheInterpreter runs programs through the zygote,
// from a spare and from its own fork, outside a sandbox, and compares what
// each left with what the same program leaves run by a fresh interpreter:
// the child must be indistinguishable from `python3 -c` (the pool's tests
// check the same in real sandboxes, and what must not leak between
// executions).
func TestPythonZygoteRunsLikeTheInterpreter(t *testing.T) {
	needPython(t)
	z := startZygote(t)
	for _, c := range []struct {
		name string
		e    execution
		// fresh, if set, is what the fresh interpreter must print, so
		// that the reference is checked too.
		fresh string
		// onlyExit compares how the processes ended, not what they printed.
		onlyExit bool
	}{
		{name: "print", e: execution{code: "print(sum(range(100)))\n"}, fresh: "4950\n"},
		{name: "inspect", e: execution{code: inspect}},
		{name: "exit status", e: execution{code: "import sys\nsys.exit(3)\n"}},
		{name: "exit status beyond a byte", e: execution{code: "import sys\nsys.exit(256 + 5)\n"}},
		{name: "exit message", e: execution{code: "raise SystemExit('bye')\n"}},
		{name: "uncaught exception", e: execution{code: "x = 1\ny = x / 0\n"}},
		{name: "compile error", e: execution{code: "def (\n"}},
		{name: "exiting", e: execution{code: exiting}, fresh: "main\nthread\natexit\nfinalized\n"},
		{name: "raw code", e: execution{code: "import sys\nprint(sys.argv, __name__)\n", raw: true}},
		// The interpreter prints the traceback before it dies of SIGINT; the
		// zygote's child does not. Through the wrapper, as every execution
		// runs, this never happens: the wrapper prints it and exits 1.
		{name: "raw keyboard interrupt", e: execution{code: "raise KeyboardInterrupt\n", raw: true}, onlyExit: true},
		{name: "raw exit", e: execution{code: "import sys\nsys.exit('raw bye')\n", raw: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := runFresh(t, z, c.e)
			if c.fresh != "" && want.Stdout != c.fresh {
				t.Fatalf("a fresh interpreter printed %q, not %q", want.Stdout, c.fresh)
			}
			for _, via := range []struct {
				name string
				run  func(testing.TB, *zygoteProc, execution) result
			}{{"spare", runSpare}, {"fork", runForked}} {
				got, want := via.run(t, z, c.e), want
				if c.onlyExit {
					want, got = result{Exit: want.Exit}, result{Exit: got.Exit}
				}
				if d := cmp.Diff(normalize(want), normalize(got)); d != "" {
					t.Errorf("%s: the zygote's child differs from a fresh interpreter (-fresh +zygote):\n%s", via.name, d)
				}
			}
		})
	}
}

// normalize replaces an execution's own directory, which differs between
// runs, by DIR.
func normalize(r result) result {
	var in struct {
		Cwd string `json:"cwd"`
	}
	if json.Unmarshal([]byte(r.Stdout), &in) == nil && in.Cwd != "" {
		r.Stdout = strings.ReplaceAll(r.Stdout, in.Cwd, "DIR")
	}
	return r
}

// TestPythonZygoteReseeds: each child draws other random numbers than the
// last (random reseeds itself at fork; numpy's generator the zygote
// reseeds).
func TestPythonZygoteReseeds(t *testing.T) {
	needPython(t)
	z := startZygote(t)
	e := execution{code: "import random\nprint(random.random())\n"}
	a, b, c := runSpare(t, z, e), runSpare(t, z, e), runForked(t, z, e)
	if a.Stdout == "" || a.Stdout == b.Stdout || b.Stdout == c.Stdout || a.Stdout == c.Stdout {
		t.Errorf("children drew %q, %q, %q", a.Stdout, b.Stdout, c.Stdout)
	}
}

// TestPythonZygoteRefusesBadRequests: a request that is not `python3 -c
// CODE` with 3 or 4 fds gets an error, and the zygote serves on.
func TestPythonZygoteRefusesBadRequests(t *testing.T) {
	needPython(t)
	z := startZygote(t)
	for _, req := range []request{
		{ID: 5, Argv: []string{"python3", "main.py"}},
		{ID: 6, Argv: []string{"python3", "-c"}},
	} {
		b, _ := json.Marshal(req)
		p := newPipes(t)
		err := unix.Sendmsg(z.ctl, b, unix.UnixRights(p.fds()...), nil, 0)
		p.closeChild()
		if err != nil {
			t.Fatal(err)
		}
		if m := z.recv(t); m.ID != req.ID || m.Error != "bad request" {
			t.Errorf("%v: the zygote answered %+v", req.Argv, m)
		}
		p.read(t)
	}
	if got := runForked(t, z, execution{code: "print('still here')\n"}); got.Stdout != "still here\n" {
		t.Errorf("after bad requests: %+v", got)
	}
}
