# Corral's python zygote: a pre-started interpreter that forks each execution.
#
# The agent starts it in a pooled sandbox as `python3 -c <this file> WRAPPER
# [PRELOAD...]` (internal/lang/zygote.go) with a control socket on fd 3. The
# messages on that socket are listed in internal/agent/proto.go; why the
# zygote works as it does, with the measurements behind it, is in
# docs/pool.md, "The zygote (python)". The processes this file runs as:
#
#   the zygote  imports PRELOAD, compiles WRAPPER, freezes its heap, learns
#               from the probe which pages a request copies, then answers
#               the agent (serve);
#   a spare     forked ahead of a request (the zygote's child, reaped by it
#               through a pidfd; without pidfds, forked through a short-lived
#               intermediate so that the agent reaps it): it copies those pages
#               and prepares itself, then waits on a socket of its own,
#               whose other end the agent holds, for one request
#               (serve_as_spare);
#   the probe   a spare, forked once at start, that copies nothing ahead,
#               serves a made-up request and reports the pages it copied
#               (probe, report_copied);
#   a child     a spare given its request, or a process the zygote forks
#               (the same way) for a request the agent sent
#               it: it becomes `python3 -c CODE ARGS`, runs CODE and exits
#               like the interpreter (become).
#
# What a child runs is on every execution's path, which was tuned: before
# the program it imports nothing a fresh interpreter has not, and anything
# added there (a system call, an object, a page it writes) is added to every
# execution. For the
# same reason functions are described by comments, not docstrings: the
# zygote keeps docstrings in its heap, where they measurably added to the
# pages each execution copies.
import sys, os, io

# What a fresh interpreter has loaded. The zygote's own imports, next, leave
# sys.modules again once PRELOAD is imported, unless PRELOAD imported them
# too (unload_own_modules).
FRESH_MODULES = set(sys.modules)
# corral_proto (the zygote protocol) sits beside this file, or Go delivers it
# with it (internal/lang/python_modules.go). It is imported by name too, as
# the others are, so that taking it out of sys.modules leaves it alive for
# the zygote, as its globals keep the others.
import signal, socket, json, ctypes, gc, select, corral_proto, atexit, _socket
# _signal, which a fresh interpreter has loaded, sets a child's mask:
# signal's wrapper makes an enum member of each signal of the old mask,
# which cost each execution about 45 copied pages.
import _signal
from corral_proto import (CONTROL_FD, MAX_MESSAGE, MAX_FDS, EXIT_SETUP_FAILED, KEY_ID, KEY_ARGV, KEY_ENV, KEY_DIR,
                          KEY_PID, KEY_PING, KEY_PONG, KEY_READY, KEY_SPARE, KEY_ERROR, KEY_EXITED, KEY_STATUS,
                          KEY_REAPS, close_fds, fork_through, reap)
OWN_MODULES = set(sys.modules) - FRESH_MODULES

# A ping as the agent encodes it starts with this.
PING_PREFIX = b'{"%s":' % KEY_PING.encode()
PING_PREFIX_LEN = len(PING_PREFIX)

# A request runs `python3 -c CODE ARGS...` (the Run step's argv): argv[1]
# is the flag, argv[2] CODE, argv[3:] its arguments, which become sys.argv
# after '-c' as in the interpreter.
ARGV_FLAG = 1
ARGV_CODE = 2
ARGV_ARGS = 3
# A request carries stdin, stdout, stderr and, when the Run step asks for
# it, the status fd: fd 3 in the child, where the wrapper reports a compile
# error (internal/lang/python.go).
REQUEST_FD_COUNTS = (3, 4)
STDERR_FD = 2

# The intermediate's report of a spare's pid, in decimal, fits in this.
MAX_PID_MESSAGE = 64

# Exit statuses (besides corral_proto's EXIT_SETUP_FAILED, a child that
# could not become the program): a program that ended with an uncaught
# exception (or a SystemExit that is not a number), as in the interpreter; a
# program that succeeded but whose standard streams would not flush at exit (the
# interpreter's status when finalizing fails, Py_RunMain in
# Python/pylifecycle.c, which it uses whatever the program's status). A
# SystemExit's number becomes the status the way exit(3) truncates it, to
# its low 8 bits.
EXIT_ERROR = 1
EXIT_FLUSH_FAILED = 120
EXIT_STATUS_MASK = 0xff

# Linux: prctl(2)'s option (linux/prctl.h) and madvise(2)'s advice
# (asm-generic/mman-common.h, Linux 5.14; an older kernel refuses it and
# nothing is copied ahead).
PR_SET_DUMPABLE = 4
MADV_POPULATE_WRITE = 23
# close_range(2)'s system call number (Linux 5.9; the same on every
# architecture since 5.1's common table) and the highest fd number, never an
# open one, are written out where they are used (has_close_range,
# install_fds): two more module globals here made each execution copy about
# 50 more pages (the probe's report), the heap's layout being what it is.
# /proc/self/pagemap (Documentation/admin-guide/mm/pagemap.rst): one 8-byte
# entry per page; bit 63 is set when the page is present, bit 56 when only
# this process maps it (so the zygote's page was copied, or a new one
# filled).
PAGE_SIZE = 4096
PAGEMAP_ENTRY_SIZE = 8
PAGEMAP_PRESENT_BIT = 63
PAGEMAP_EXCLUSIVE_BIT = 56
# A private writable mapping larger than this is a reservation (address
# space set aside), not memory in use: copying it ahead would fill it.
MAX_MAPPING_IN_USE = 256 << 20
# Private writable mappings never copied ahead: the stack and the kernel's.
NOT_COPIED_AHEAD = ('[stack]', '[vvar]', '[vsyscall]')

# The probe's request: Corral's own program, one printed line, run through
# the wrapper like an execution's (from a pipe rather than a file), with the
# zygote's environment, which is an execution's (the agent starts the zygote
# with the Run step's: TestPythonSharedWithGo checks), so that it takes the
# path most executions take (enter).
PROBE_PROGRAM = b'print(0)\n'
PROBE_PROGRAM_PATH = '/dev/stdin'
# The probe's report is read in chunks of this size, up to a bound.
PROBE_READ_SIZE = 1 << 16
MAX_PROBE_REPORT = 1 << 20


# Once, in the zygote, at start.

# Set PR_SET_DUMPABLE: programs run with the zygote's uid, and only a
# non-dumpable process's memory is out of their reach (ptrace, /proc/PID/mem).
# A child is dumpable again, as any process is.
def set_dumpable(libc, dumpable):
    libc.prctl(PR_SET_DUMPABLE, dumpable, 0, 0, 0)


# The handler of every signal that has one, as a fresh interpreter set them,
# which every child must start with.
def signal_dispositions():
    dispositions = {}
    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            dispositions[s] = signal.getsignal(s)
        except (OSError, ValueError):
            pass
    return dispositions


# Import each of names, once for every child; the ones that fail are reported
# (not fatal: the rest still serve).
def import_preload(names):
    failed = []
    for name in names:
        try:
            __import__(name)
        except Exception as e:
            failed.append('%s: %s' % (name, e))
    return failed


# Take the zygote's own modules (names) out of sys.modules, once, at start,
# so that every child starts with a fresh interpreter's sys.modules (and
# PRELOAD) without a step of its own: unloading them in each child wrote to
# about 120 pages, which each execution then copied. The zygote keeps using
# them through its globals; a program that imports one gets a fresh module,
# as in a fresh interpreter.
def unload_own_modules(names):
    for name in names:
        sys.modules.pop(name, None)


# Set every disposition in dispositions again, in the zygote, once: a
# preloaded module may have changed some, and every process the zygote forks
# inherits them.
def restore_signals(dispositions):
    for s, h in dispositions.items():
        try:
            signal.signal(s, h)
        except (OSError, ValueError, TypeError):
            pass


# Block every signal but SIGCHLD: programs run with the zygote's uid and may
# signal it, and no signal should end it or raise in it half-way through a
# fork or a message. Blocked, rather than ignored, they leave the
# dispositions a child must start with as they are: a forked process starts
# with no pending signal, and a child has only to empty its mask, one system
# call, where setting the dispositions back was one for every signal.
# SIGCHLD keeps its default, which does nothing.
def block_signals():
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - {signal.SIGCHLD})


# The umask, which can only be read by setting it (to any value: the old one
# is put back at once).
def current_umask():
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# The zygote's state, set up at start (then its heap is frozen), which every
# process it forks inherits.
class Zygote:

    # Start, in this order: become non-dumpable; note the signal dispositions
    # each child starts with (before preload can change them); compile the
    # wrapper run_src (the code every Run step passes to `python3 -c`:
    # compiled once here instead of in every child); import preload, and
    # take the zygote's own modules out of sys.modules; set the
    # dispositions back and block signals; note the umask a child takes; keep
    # to one CPU; freeze the heap.
    def __init__(self, run_src, preload):
        self.libc = ctypes.CDLL(None, use_errno=True)
        set_dumpable(self.libc, 0)
        dispositions = signal_dispositions()
        self.run_src = run_src
        self.run_code = compile(run_src, '<string>', 'exec')
        self.failed = import_preload(preload)
        self.preloaded = set(sys.modules) - FRESH_MODULES - OWN_MODULES
        unload_own_modules(OWN_MODULES - self.preloaded)
        restore_signals(dispositions)
        block_signals()
        self.umask = current_umask()
        # The zygote runs on one CPU, the one it started on, and so does a
        # spare until it has copied its pages: a page-table change of a
        # process that has run on another CPU costs a TLB-flush interrupt
        # to that CPU, which on these VMs made each copy-on-write fault
        # several times dearer (docs/pool.md). Not a CPU chosen by pid:
        # each sandbox has a pid namespace of its own, where the zygote's
        # pid is the same, so every zygote would share one CPU. A child
        # takes the sandbox's own CPUs back (prepare), before any program
        # runs.
        self.cpus = os.sched_getaffinity(0)
        cpu = self.libc.sched_getcpu()
        if cpu not in self.cpus:
            cpu = min(self.cpus)
        os.sched_setaffinity(0, {cpu})
        # Forked children do not copy the preloaded heap to collect it.
        gc.collect()
        gc.freeze()
        self.ctl = socket.socket(fileno=CONTROL_FD)
        # The pages a request copies, as (start, size) runs: what the probe
        # found, once it has run; none means every writable page.
        self.copied = []
        # The children the zygote forked itself and reaps, by pidfd; pidfds
        # says whether the kernel has them (fork_child_process).
        self.children = {}
        self.pidfds = has_pidfds()
        # The zygote's writable mappings, read just before the probe forks.
        self.maps = []
        self.close_range = has_close_range(self.libc)
        # madvise, looked up and typed here, once: a spare's first
        # z.libc.madvise went through ctypes' lookup (CDLL.__getattr__, a
        # new function object cached in the library's dict) and each call
        # made two argument objects, all before or while it copied its
        # pages, which cost each execution faults the copy-ahead is there
        # to save.
        self.madvise = self.libc.madvise
        self.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        # The environment as a request lists it (a pool's requests list
        # the zygote's own, sorted, as the agent started it).
        self.env = ['%s=%s' % kv for kv in os.environ.items()]

    # Send m to the agent.
    def send(self, m):
        self.ctl.send(encode(m))


# The zygote's messages on every execution's path (a spare's pid, a pong, a
# child's exit) and the ping it answers are objects of numbers only: the
# zygote writes and reads them itself rather than through json, whose
# objects, touched after each fork, were about 30 more pages the zygote
# copied per execution (sending a spare's fd without socket.send_fds and a
# spare's socket without socket.socket's wrapper count in that too).

# m as JSON: by hand when every value is an int (json.dumps otherwise).
def encode(m):
    if all(type(v) is int for v in m.values()):
        return ('{%s}' % ','.join(['"%s":%d' % kv for kv in m.items()])).encode()
    return json.dumps(m).encode()


# The tag of msg if it is a ping as the agent sends it ({"ping":N}, the
# agent's encoding/json); else None, and json reads it.
def ping_tag(msg):
    if msg[:PING_PREFIX_LEN] == PING_PREFIX and msg[-1:] == b'}':
        try:
            return int(msg[PING_PREFIX_LEN:-1])
        except ValueError:
            return None
    return None


# Whether this kernel opens pidfds (Linux 5.3), which let the zygote wait for
# its children and the agent's control socket at once.
def has_pidfds():
    try:
        os.close(os.pidfd_open(os.getpid()))
        return True
    except (AttributeError, OSError):
        return False


# Whether close_range(2) works here (Linux 5.9; gVisor, a seccomp filter may
# refuse it): closing a range with no open fd in it succeeds.
def has_close_range(libc):
    try:
        return libc.syscall(ctypes.c_long(436), ctypes.c_long(0xffffffff), ctypes.c_long(0xffffffff),
                            ctypes.c_long(0)) == 0
    except (AttributeError, OSError):
        return False


# Requests and processes.

# Whether a request is one the zygote serves: `python3 -c CODE ARGS` with
# stdin, stdout, stderr and perhaps a status fd.
def servable(m, fds):
    argv = m.get(KEY_ARGV) or []
    return len(argv) >= ARGV_ARGS and argv[ARGV_FLAG] == '-c' and len(fds) in REQUEST_FD_COUNTS


# End a child that could not become the program: it says why on its stderr
# (the request's, once installed).
def setup_failed(e):
    os.write(STDERR_FD, ('corral zygote: cannot set up the child: %r\n' % (e,)).encode())
    os._exit(EXIT_SETUP_FAILED)


# A spare, then a child: from here to the probe's measurement, in the order
# it runs. Every execution runs this code, and every function it calls is a
# code object and a function object whose pages the child writes (reference
# counts), so copies. Split into the functions below, it copies as many
# pages as it did as one function (about 515 ahead, about 20 once a request
# arrives, here; any edit of the script moves those by a few): measure them
# again (the probe's report, /proc/PID/pagemap) before adding to it.

# In a spare, forked from the zygote with z's state: copy ahead the pages a
# request writes, first, since every page written before is a fault; close
# drop (the zygote's end of sp, if the zygote forked it) and the control
# socket; prepare, then wait on sp for one request (which may have come
# meanwhile) and serve it; exit if the agent lets it go. The probe (report
# set, its fd) copies nothing ahead: it measures what its request copies.
def serve_as_spare(z, sp, report=None, drop=None):
    try:
        if report is None:
            prefault(z)
        if drop is not None:
            drop.close()
        z.ctl.close()
        prepare(z)
        msg, fds, _, _ = socket.recv_fds(sp, MAX_MESSAGE, MAX_FDS)
        if not msg:
            os._exit(0)
        m = json.loads(msg)
        sp.close()
        if not servable(m, fds):
            os.write(fds[STDERR_FD] if len(fds) > STDERR_FD else STDERR_FD, b'corral zygote: bad request\n')
            os._exit(EXIT_SETUP_FAILED)
        become(z, m, fds, report)
    finally:
        os._exit(EXIT_SETUP_FAILED)


# Copy now, while idle, the pages an execution writes, rather than one fault
# at a time once a request runs (MADV_POPULATE_WRITE): those the probe found,
# else every writable page.
def prefault(z):
    madvise = z.madvise
    for lo, size in z.copied or sizes(writable_mappings()):
        madvise(lo, size, MADV_POPULATE_WRITE)


# Address runs (start, end) as (start, size), the arguments of madvise(2).
def sizes(runs):
    return [(lo, hi - lo) for lo, hi in runs]


# In a forked child, before its request, what does not depend on the request
# (a spare does this while it waits): a session of its own, the sandbox's
# CPUs (the zygote runs on one of them), the empty mask of a fresh
# interpreter (its dispositions are the zygote's), numpy reseeded.
def prepare(z):
    try:
        os.setsid()
        os.sched_setaffinity(0, z.cpus)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, ())
    except BaseException as e:
        setup_failed(e)
    reseed_numpy()


# Reseed numpy's global generator, if numpy is loaded, so that children do not
# repeat the zygote's sequence (random reseeds itself at fork).
def reseed_numpy():
    np = sys.modules.get('numpy')
    if np is not None:
        try:
            np.random.seed()
        except Exception:
            pass


# In a prepared child: become what `python3 -c CODE ARGS` would be in a fresh
# process, run CODE and exit as the interpreter does, in its order: threads
# joined, atexit handlers run, the standard streams flushed, then the
# program's objects released (whose finalizers may print; __main__ is held
# until then, as in the interpreter) and the streams flushed again. report
# (the probe's fd) is kept open for report_copied.
def become(z, m, fds, report=None):
    report = install_fds(z, fds, report)
    enter(z, m)
    main = type(sys)('__main__')
    code = run(z, m[KEY_ARGV], main)
    join_threads()
    run_atexit_handlers()
    code = flush_standard_streams(code)
    main = None
    release_main()
    code = flush_standard_streams(code)
    if report is not None:
        report_copied(report, z.maps)
    os._exit(code)


# Make the request's fds 0, 1, 2 [, 3] and close every other fd (the control
# socket and a spare's socket among them), but report (the probe's, above
# fds), which becomes the fd after them. Returns report's new number. The rest
# are closed in one close_range(2) where the zygote found it works, else by
# listing them (not os.closerange: where close_range is missing that is a
# close() for every number up to the fd limit).
def install_fds(z, fds, report):
    keep = len(fds)
    if report is not None and report < keep:
        os._exit(EXIT_SETUP_FAILED)  # installing fds would clobber it
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
    if report is not None:
        os.dup2(report, keep)
        report, keep = keep, keep + 1
    if z.close_range and z.libc.syscall(ctypes.c_long(436), ctypes.c_long(keep), ctypes.c_long(0xffffffff),
                                        ctypes.c_long(0)) == 0:
        return report
    for fd in os.listdir('/proc/self/fd'):
        if int(fd) >= keep:
            try:
                os.close(int(fd))
            except OSError:
                pass
    return report


# Take the request's environment and working directory, the umask the zygote
# started with, and be dumpable again. The environment is set only where the
# request's list differs from the zygote's own: a pool's zygote starts with
# an execution's environment, so most requests find theirs in place.
def enter(z, m):
    try:
        set_dumpable(z.libc, 1)
        env = m.get(KEY_ENV) or []
        if env != z.env:
            os.environ.clear()
            for kv in env:
                k, _, v = kv.partition('=')
                os.environ[k] = v
        os.chdir(m.get(KEY_DIR) or '/')
        os.umask(z.umask)
    except BaseException as e:
        setup_failed(e)


# Run CODE as `python3 -c` does: in main, a fresh __main__, with sys.argv
# ['-c', ARGS...] (the zygote's compiled wrapper when CODE is the wrapper).
# Returns the exit status the interpreter would give, or dies of SIGINT
# after a KeyboardInterrupt, as it does.
def run(z, argv, main):
    main.__builtins__ = __builtins__
    sys.modules['__main__'] = main
    sys.argv = ['-c'] + argv[ARGV_ARGS:]
    code = 0
    try:
        src = argv[ARGV_CODE]
        code_obj = z.run_code if src == z.run_src else compile(src, '<string>', 'exec')
        exec(code_obj, main.__dict__)
    except SystemExit as e:
        code = system_exit_status(e.code)
    except KeyboardInterrupt:
        die_of_sigint()
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = EXIT_ERROR
    return code


# The exit status the interpreter gives SystemExit(code) (CPython's
# handle_system_exit): None is 0, a number its low 8 bits, anything else is
# printed to stderr and is 1.
def system_exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & EXIT_STATUS_MASK
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return EXIT_ERROR


# End as the interpreter does after an uncaught KeyboardInterrupt: by SIGINT,
# with its default action, so that the parent sees the signal.
def die_of_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


# Wait for the program's non-daemon threads, as the interpreter does before
# exiting. Relies on threading._shutdown, private, which CPython's own exit
# calls; where it is missing or fails (or threading was never imported)
# nothing is waited for.
def join_threads():
    try:
        th = sys.modules.get('threading')
        if th is not None:
            th._shutdown()
    except BaseException:
        pass


# Run the program's atexit handlers, as the interpreter does before exiting.
# Relies on atexit._run_exitfuncs, private, which CPython's own exit calls;
# where it is missing or fails, handlers do not run. atexit is one of the
# zygote's own modules, imported at start and out of sys.modules with the
# others, so a child does not find it loaded unless its program loaded it:
# imported here instead, in each child, it cost about 65 copied pages. A
# program that imported atexit has its own module object, whose handlers
# are the ones to run (the interpreter's since CPython 3.10, the module's
# before).
def run_atexit_handlers():
    try:
        (sys.modules.get('atexit') or atexit)._run_exitfuncs()
    except BaseException:
        pass


# Flush sys.stdout and sys.stderr. Returns the exit status: code, or
# EXIT_FLUSH_FAILED if a flush failed and code was a success.
def flush_standard_streams(code):
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            code = code or EXIT_FLUSH_FAILED
    return code


# What leaving the interpreter does for the program's own objects, without
# tearing down the zygote's heap (that would cost more than the execution):
# the program's __main__ is cleared the way the interpreter clears a module at
# exit (objects are released in reference order: __del__ methods run, unclosed
# files are flushed and closed), a file still open elsewhere is flushed, and a
# collection finalizes the cycles left.
def release_main():
    try:
        user = sys.modules.pop('__main__', None)
        d = getattr(user, '__dict__', None)
        user = None
        if isinstance(d, dict):
            for k in clearing_order(d):
                d[k] = None
        d = None
        flush_open_files()
        gc.collect()
    except BaseException:
        pass


# The order in which CPython clears a module's names at exit
# (_PyModule_ClearDict, Objects/moduleobject.c): names with one leading
# underscore first, then the others, each in the dict's order; __builtins__ is
# kept. This copies the interpreter's behaviour, not an API: nothing breaks if
# CPython changes it, finalizers only run in another order than a process of
# its own would run them.
def clearing_order(names):
    return sorted((k for k in names if k != '__builtins__'), key=lambda k: not is_single_underscore(k))


# Whether name starts with exactly one underscore.
def is_single_underscore(name):
    return isinstance(name, str) and name[:1] == '_' and name[:2] != '__'


# Flush every file object still open anywhere (a module's global, a cycle), as
# releasing it would. Relies on gc.get_objects() leaving out what gc.freeze()
# moved to the permanent generation (CPython's gc), so only the program's
# objects are walked, not the zygote's heap. Were the zygote's objects listed
# too, the walk would still flush the program's files, but touch (and so
# copy) the zygote's heap on every execution.
def flush_open_files():
    for o in gc.get_objects():
        if isinstance(o, io.IOBase):
            try:
                if not o.closed:
                    o.flush()
            except Exception:
                pass


# The probe's measurement (and, where there is no probe, what a spare copies
# ahead).

# The process's private writable mappings that hold memory in use, as (start,
# end) addresses; none if /proc/self/maps cannot be read.
def writable_mappings():
    try:
        with open('/proc/self/maps') as f:
            maps = f.read().splitlines()
    except OSError:
        return []
    return in_use_mappings(maps)


# The (start, end) addresses of the private writable mappings among the lines
# of /proc/PID/maps ("start-end perms offset dev inode [path]", perms as
# "rw-p": readable, writable, executable, p for private), but the stack, the
# kernel's pages and reservations.
def in_use_mappings(maps):
    out = []
    for line in maps:
        fields = line.split()
        if len(fields) < 2:
            continue
        perms = fields[1]
        path = fields[5] if len(fields) > 5 else ''
        if perms[:2] != 'rw' or perms[3] != 'p' or path in NOT_COPIED_AHEAD:
            continue
        lo, hi = (int(x, 16) for x in fields[0].split('-'))
        if hi - lo > MAX_MAPPING_IN_USE:
            continue
        out.append((lo, hi))
    return out


# In the probe, at its end: write to fd, as JSON, which pages of the zygote's
# writable mappings maps it had to copy (or newly filled), as address runs;
# none where pagemap cannot be read. The zygote read maps before it forked
# the probe: read here, they cost the probe pages (the text, its lines),
# which the report would count as the request's (about 20 here).
def report_copied(fd, maps):
    runs = []
    try:
        pm = os.open('/proc/self/pagemap', os.O_RDONLY)
        for lo, hi in maps:
            size = (hi - lo) // PAGE_SIZE * PAGEMAP_ENTRY_SIZE
            offset = lo // PAGE_SIZE * PAGEMAP_ENTRY_SIZE
            runs.extend(exclusive_runs(memoryview(os.pread(pm, size, offset)).cast('Q'), lo, hi))
    except (OSError, ValueError, TypeError):
        runs = []
    os.write(fd, json.dumps(runs).encode())


# The runs of pages present and mapped by this process only, as (start, end)
# addresses, from the pagemap entries of the mapping [lo, hi).
def exclusive_runs(entries, lo, hi):
    runs = []
    start = None
    for i, v in enumerate(entries):
        mine = v >> PAGEMAP_PRESENT_BIT and v >> PAGEMAP_EXCLUSIVE_BIT & 1
        if mine and start is None:
            start = lo + i * PAGE_SIZE
        elif not mine and start is not None:
            runs.append((start, lo + i * PAGE_SIZE))
            start = None
    if start is not None:
        runs.append((start, hi))
    return runs


# In the zygote: spares, the probe, and its loop.

# Fork a spare and hand the agent the spare's socket with its pid: the agent
# sends it a request without the zygote on the way, and drops the spare it
# held before (which then exits). The zygote does not wait for the spare to
# copy its pages and prepare: that is off the reset's path (a request sent
# meanwhile waits on the socket), where under load it made the reset as
# long as an execution.
def make_spare(z):
    mine, theirs = _socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    if z.pidfds:
        pid = fork_child_process(z, lambda: spare_main(z, mine, theirs), [], lambda e: None)
    else:
        pid = fork_spare_through(z, mine, theirs)
    theirs.close()
    if pid > 0:
        try:
            z.ctl.sendmsg([encode({KEY_SPARE: pid})],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, mine.fileno().to_bytes(4, sys.byteorder))])
        except OSError:
            pass
    mine.close()


# In a spare forked by the zygote itself: serve, dropping the zygote's end of
# the spare's socket (or the agent closing its own would not end the wait).
def spare_main(z, mine, theirs):
    serve_as_spare(z, theirs, drop=mine)


# Without pidfds: fork a spare through a short-lived intermediate, so that its
# parent is the agent, which reaps it; the intermediate reports the spare's
# pid on the spare's socket, which the zygote reads here. Returns the pid, or
# -1.
def fork_spare_through(z, mine, theirs):
    try:
        pid = os.fork()
    except OSError:
        return -1
    if pid == 0:
        try:
            mine.close()
            gpid = os.fork()
            if gpid == 0:
                serve_as_spare(z, theirs)
            theirs.send(str(gpid).encode())
        finally:
            os._exit(0)
    reap(pid)
    try:
        return int(mine.recv(MAX_PID_MESSAGE))
    except (OSError, ValueError):
        return -1


# Fork a process that runs child() (which never returns), closing fds (the
# request's, which are the process's now) in the zygote. Where the kernel has
# pidfds, the process is the zygote's own child: the zygote reaps it and
# tells the agent its exit status ({"exited": pid, "status": wait status}),
# which costs one fork. Elsewhere it is forked through a short-lived
# intermediate, so that its parent is the agent, which reaps it: two forks
# and an exit. Returns the pid (0 when the intermediate reports it), or -1
# after failed(message).
def fork_child_process(z, child, fds, failed, rid=None):
    if not z.pidfds:
        fork_through(rid, fds, z.send, child)
        return 0
    try:
        pid = os.fork()
    except OSError as e:  # the sandbox's process limit, its memory
        close_fds(fds)
        failed('fork: %s' % e)
        return -1
    if pid == 0:
        try:
            child()
        finally:
            os._exit(EXIT_SETUP_FAILED)
    close_fds(fds)
    try:
        z.children[os.pidfd_open(pid)] = pid
    except OSError:
        reap(pid)  # unreachable without pidfds: the process cannot be followed
        failed('pidfd_open failed')
        return -1
    return pid


# Reap the zygote's children whose pidfds are readable in ready and tell the
# agent how each ended.
def reap_children(z, ready):
    for fd in ready:
        pid = z.children.pop(fd, None)
        if pid is None:
            continue
        os.close(fd)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            continue
        z.send({KEY_EXITED: pid, KEY_STATUS: status})


# Serve a made-up request in a spare that copies nothing ahead, and return
# which pages serving it copied, as address runs: later spares copy those
# ahead instead of every writable page (several times fewer, each of which
# costs the machine at fork, copy and exit). The request is Corral's own
# (PROBE_PROGRAM), taking the path a real one takes from the socket to the
# exit; no program of anybody's is involved. Nothing is learned where pagemap
# is missing (gVisor).
def probe(z):
    if not os.path.exists('/proc/self/pagemap'):
        return []
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    src_r, src_w = os.pipe()
    os.write(src_w, PROBE_PROGRAM)
    os.close(src_w)
    null = os.open('/dev/null', os.O_RDWR)
    z.maps = writable_mappings()
    try:
        pid = os.fork()
    except OSError:
        pid = -1
    if pid == 0:
        try:
            mine.close()
            os.close(r)
            serve_as_spare(z, theirs, report=w)
        finally:
            os._exit(EXIT_SETUP_FAILED)
    theirs.close()
    os.close(w)
    data = b''
    try:
        if pid > 0:
            req = {KEY_ARGV: ['python3', '-c', z.run_src, PROBE_PROGRAM_PATH], KEY_DIR: '/', KEY_ENV: z.env}
            socket.send_fds(mine, [json.dumps(req).encode()], [src_r, null, null, null])
            data = read_report(r)
    except OSError:
        data = b''
    for fd in (r, src_r, null):
        os.close(fd)
    mine.close()
    if pid > 0:
        reap(pid)
    return parse_report(data)


# Read the probe's report from fd until it ends, up to MAX_PROBE_REPORT.
def read_report(fd):
    data = b''
    while len(data) < MAX_PROBE_REPORT:
        b = os.read(fd, PROBE_READ_SIZE)
        if not b:
            break
        data += b
    return data


# The probe's runs from its report; none if it is not one.
def parse_report(data):
    try:
        return [(int(lo), int(hi)) for lo, hi in json.loads(data)]
    except (ValueError, TypeError):
        return []


# The message that says the zygote is ready, with the CPU it keeps to, which
# the pool reads (a tenant's executions one after another go to sandboxes
# whose zygotes share a CPU). Read from the affinity, once, rather than kept
# in the zygote's state, whose layout decides the pages each execution
# copies (two more module globals added about 50: install_fds).
def ready(z):
    return {KEY_READY: {'python': sys.version.split()[0], 'modules': sorted(z.preloaded), 'failed': z.failed,
                        'cpu': min(os.sched_getaffinity(0))},
            KEY_REAPS: z.pidfds}


# Answer the agent until it closes the control socket: pings, and requests
# that came to the zygote because there was no spare.
def serve(z):
    while True:
        if z.children:
            ready = select.select([z.ctl] + list(z.children), [], [])[0]
            reap_children(z, ready)
            if z.ctl not in ready:
                continue
        try:
            msg, fds, _, _ = socket.recv_fds(z.ctl, MAX_MESSAGE, MAX_FDS)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)
        tag = ping_tag(msg)
        if tag is not None:
            z.send(pong(z, tag))
            continue
        m = json.loads(msg)
        if KEY_PING in m:
            z.send(pong(z, m[KEY_PING]))
        else:
            fork_child(z, m, fds)


# The answer to a reset's ping, once a new spare is made (nothing of the last
# execution runs any more, so it has seen none of it). The limits, priority
# and affinity the zygote passes on, which a program of its uid may change,
# the agent checks before it pings (internal/agent/reset.go): checked here,
# in python, that wrote to about 20 pages the spare's fork had made shared.
def pong(z, tag):
    make_spare(z)
    return {KEY_PONG: tag}


# Fork a child for the request m (fork_child_process) and say its pid, or
# why there is none.
def fork_child(z, m, fds):
    rid = m.get(KEY_ID)
    if not servable(m, fds):
        close_fds(fds)
        z.send({KEY_ID: rid, KEY_ERROR: 'bad request'})
        return
    failed = lambda e: z.send({KEY_ID: rid, KEY_ERROR: e})
    pid = fork_child_process(z, lambda: start_child(z, m, fds), fds, failed, rid)
    if pid > 0:
        z.send({KEY_ID: rid, KEY_PID: pid})


# In the new process: become the request's program (never returns).
def start_child(z, m, fds):
    try:
        z.ctl.close()
        prepare(z)
        become(z, m, fds)
    finally:
        os._exit(EXIT_SETUP_FAILED)


# The entry point, run as `python3 -c <this file> WRAPPER [PRELOAD...]`, so
# that sys.argv is ['-c', WRAPPER, PRELOAD...]. (Tests find the zygote among
# a sandbox's processes by this name in its command line:
# internal/pool/pool_test.go.)
def _corral_zygote():
    z = Zygote(sys.argv[1], sys.argv[2:])
    z.copied = sizes(probe(z))
    # What the zygote made since its heap was frozen (the probe's runs, its
    # fds' objects) is frozen too: a child's collection walks none of it.
    gc.collect()
    gc.freeze()
    make_spare(z)
    z.send(ready(z))
    serve(z)


if __name__ == '__main__':
    _corral_zygote()
