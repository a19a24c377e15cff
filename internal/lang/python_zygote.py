import sys, os, io
def _corral_zygote():
    # What a fresh interpreter has loaded; what the zygote imports for itself
    # beyond that is unloaded again in each child.
    fresh = set(sys.modules)
    import signal, socket, json, resource, ctypes, gc
    own = set(sys.modules) - fresh
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_DUMPABLE = 4
    # Programs run with our uid: non-dumpable keeps them out of our memory.
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    sigs = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
    dispositions = {}
    for s in sigs:
        try:
            dispositions[s] = signal.getsignal(s)
        except (OSError, ValueError):
            pass
    # argv[1] is the code every Run step passes to `python3 -c` (Corral's
    # wrapper): compiled once here instead of in every child.
    run_src = sys.argv[1]
    run_code = compile(run_src, '<string>', 'exec')
    preload = sys.argv[2:]
    failed = []
    for name in preload:
        try:
            __import__(name)
        except Exception as e:
            failed.append('%s: %s' % (name, e))
    preloaded = set(sys.modules) - fresh - own
    unload = own - preloaded
    for s in dispositions:
        if s != signal.SIGCHLD:
            try:
                signal.signal(s, signal.SIG_IGN)
            except (OSError, ValueError):
                pass
    umask = os.umask(0o022)
    os.umask(umask)
    def snapshot():
        return ([resource.getrlimit(getattr(resource, r)) for r in dir(resource) if r.startswith('RLIMIT_')],
                os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)))
    baseline = snapshot()
    gc.collect()
    gc.freeze()  # forked children do not copy the preloaded heap to collect it
    ctl = socket.socket(fileno=3)
    def send(m):
        ctl.send(json.dumps(m).encode())

    def prepare():
        # In a forked child, before its request: what does not depend on
        # the request (a spare does this while it waits).
        try:
            os.setsid()
            for s, h in dispositions.items():
                try:
                    signal.signal(s, h)
                except (OSError, ValueError, TypeError):
                    pass
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
        except BaseException as e:
            os.write(2, ('corral zygote: cannot set up the child: %r\n' % (e,)).encode())
            os._exit(70)
        for name in unload:
            sys.modules.pop(name, None)
        np = sys.modules.get('numpy')
        if np is not None:
            try:
                np.random.seed()
            except Exception:
                pass

    def child(m, fds, report=None):
        # Runs in the forked child, prepared: become what `python3 -c CODE
        # ARGS` would be in a fresh process, then run CODE and exit like
        # the interpreter. report (the probe's, above fds) is kept open, as
        # the fd after them, for report_copied.
        keep = len(fds)
        if report is not None and report < keep:
            os._exit(70)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        if report is not None:
            os.dup2(report, keep)
            report, keep = keep, keep + 1
        # Close the rest by listing them: a range up to the fd limit is a
        # million close() calls where close_range is missing.
        for fd in os.listdir('/proc/self/fd'):
            if int(fd) >= keep:
                try:
                    os.close(int(fd))
                except OSError:
                    pass
        try:
            libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
            os.environ.clear()
            for kv in m.get('env') or []:
                k, _, v = kv.partition('=')
                os.environ[k] = v
            os.chdir(m.get('dir') or '/')
            os.umask(umask)
        except BaseException as e:
            os.write(2, ('corral zygote: cannot set up the child: %r\n' % (e,)).encode())
            os._exit(70)
        argv = m['argv']
        main = type(sys)('__main__')
        main.__builtins__ = __builtins__
        sys.modules['__main__'] = main
        sys.argv = ['-c'] + argv[3:]
        code = 0
        try:
            code_obj = run_code if argv[2] == run_src else compile(argv[2], '<string>', 'exec')
            exec(code_obj, main.__dict__)
        except SystemExit as e:
            c = e.code
            if c is None:
                code = 0
            elif isinstance(c, int):
                code = c & 0xff
            else:
                try:
                    print(c, file=sys.stderr)
                except Exception:
                    pass
                code = 1
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            sys.excepthook(*sys.exc_info())
            code = 1
        try:
            th = sys.modules.get('threading')
            if th is not None:
                th._shutdown()
        except BaseException:
            pass
        try:
            import atexit
            atexit._run_exitfuncs()
        except BaseException:
            pass
        # The interpreter's order: standard streams flushed, then the
        # program's objects released (whose finalizers may print), then
        # the streams flushed again.
        for last in (False, True):
            for f in (sys.stdout, sys.stderr):
                try:
                    f.flush()
                except BaseException:
                    code = code or 120
            if not last:
                main = None
                release()
        if report is not None:
            report_copied(report)
        os._exit(code)

    def release():
        # What leaving the interpreter does for the program's own objects,
        # without tearing down the zygote's heap (that would cost more than
        # the execution): the program's __main__ is cleared the way the
        # interpreter clears a module at exit (so objects are released in
        # reference order: __del__ methods run, unclosed files are flushed
        # and closed), a file still open elsewhere is flushed, and a
        # collection finalizes the cycles left. gc.get_objects() leaves out
        # the zygote's frozen heap.
        try:
            user = sys.modules.pop('__main__', None)
            d = getattr(user, '__dict__', None)
            user = None
            if isinstance(d, dict):
                # Names with one leading underscore first, as it does.
                private = lambda k: isinstance(k, str) and k[:1] == '_' and k[:2] != '__'
                for k in sorted((k for k in d if k != '__builtins__'), key=lambda k: not private(k)):
                    d[k] = None
            d = None
            for o in gc.get_objects():
                if isinstance(o, io.IOBase):
                    try:
                        if not o.closed:
                            o.flush()
                    except Exception:
                        pass
            gc.collect()
        except BaseException:
            pass

    def servable(m, fds):
        # A request is `python3 -c CODE ARGS` with stdin, stdout, stderr
        # and perhaps a status fd.
        argv = m.get('argv') or []
        return len(argv) >= 3 and argv[1] == '-c' and len(fds) in (3, 4)

    def reap(pid):
        # Wait for an intermediate child (it exits at once).
        while True:
            try:
                os.waitpid(pid, 0)
                return
            except InterruptedError:
                continue
            except ChildProcessError:
                return

    def spare_main(sp, report=None):
        # A spare: forked ahead, it waits for one request, which the agent
        # sends straight to it (the zygote handed the agent the other end
        # of sp), and serves it. The probe is a spare that copies nothing
        # ahead and reports to report what its request made it copy.
        try:
            ctl.close()
            if report is None:
                prefault()
            prepare()
            sp.send(str(os.getpid()).encode())
            msg, fds, _, _ = socket.recv_fds(sp, 1 << 20, 8)
            if not msg:
                os._exit(0)
            m = json.loads(msg)
            sp.close()
            if not servable(m, fds):
                os.write(fds[2] if len(fds) > 2 else 2, b'corral zygote: bad request\n')
                os._exit(70)
            child(m, fds, report)
        finally:
            os._exit(70)

    def writable():
        # Our private writable mappings that hold memory in use, as
        # (start, end) addresses.
        try:
            with open('/proc/self/maps') as f:
                maps = f.read().splitlines()
        except OSError:
            return []
        out = []
        for line in maps:
            f = line.split()
            if len(f) < 2 or f[1][:2] != 'rw' or f[1][3] != 'p' or (len(f) > 5 and f[5] in ('[stack]', '[vvar]', '[vsyscall]')):
                continue
            lo, hi = (int(x, 16) for x in f[0].split('-'))
            if hi - lo > 256 << 20:
                continue  # a reservation, not memory in use
            out.append((lo, hi))
        return out

    def prefault():
        # Copy now, while idle, the pages an execution writes, rather than
        # one fault at a time once a request runs (MADV_POPULATE_WRITE,
        # Linux 5.14): those the probe found, else every writable page.
        for lo, hi in copied or writable():
            libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), 23)

    def report_copied(fd):
        # In the probe, at its end: which of the pages it shares with the
        # zygote it had to copy (or newly filled), from /proc/self/pagemap
        # (bit 63 present, bit 56 mapped here only), as address runs.
        runs = []
        try:
            pm = os.open('/proc/self/pagemap', os.O_RDONLY)
            for lo, hi in writable():
                flags = memoryview(os.pread(pm, (hi - lo) // 4096 * 8, lo // 4096 * 8)).cast('Q')
                start = None
                for i, v in enumerate(flags):
                    mine = v >> 63 and v >> 56 & 1
                    if mine and start is None:
                        start = lo + i * 4096
                    elif not mine and start is not None:
                        runs.append((start, lo + i * 4096))
                        start = None
                if start is not None:
                    runs.append((start, hi))
        except (OSError, ValueError, TypeError):
            runs = []
        os.write(fd, json.dumps(runs).encode())

    def probe():
        # Serve a made-up request in a spare that copies nothing ahead, and
        # learn which pages serving it copied: later spares copy those
        # ahead instead of every writable page (several times fewer, each
        # of which costs the machine at fork, copy and exit). The request
        # is ours, a program that prints one line, taking the path a real
        # one takes from the socket to the exit; no program of anybody's
        # is involved. Nothing is learned where pagemap is missing (gVisor).
        if not os.path.exists('/proc/self/pagemap'):
            return []
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        r, w = os.pipe()
        src_r, src_w = os.pipe()
        os.write(src_w, b'print(0)\n')
        os.close(src_w)
        null = os.open('/dev/null', os.O_RDWR)
        try:
            pid = os.fork()
        except OSError:
            pid = -1
        if pid == 0:
            try:
                mine.close()
                os.close(r)
                spare_main(theirs, report=w)
            finally:
                os._exit(70)
        theirs.close()
        os.close(w)
        data = b''
        try:
            if pid > 0:
                mine.settimeout(10)
                mine.recv(64)
                req = {'argv': ['python3', '-c', run_src, '/dev/stdin'], 'dir': '/',
                       'env': ['PATH=/usr/local/bin:/usr/bin:/bin', 'HOME=/workspace', 'LANG=C.UTF-8',
                               'PYTHONDONTWRITEBYTECODE=1', 'PYTHONHASHSEED=0']}
                socket.send_fds(mine, [json.dumps(req).encode()], [src_r, null, null, null])
                while len(data) < 1 << 20:
                    b = os.read(r, 1 << 16)
                    if not b:
                        break
                    data += b
        except OSError:
            data = b''
        for fd in (r, src_r, null):
            os.close(fd)
        mine.close()
        if pid > 0:
            reap(pid)
        try:
            return [(int(lo), int(hi)) for lo, hi in json.loads(data)]
        except (ValueError, TypeError):
            return []

    def make_spare():
        # Fork a spare through a short-lived intermediate, so that its
        # parent is the agent, and hand the agent the spare's socket with
        # its pid: the agent sends it a request without us on the way, and
        # drops the spare it held before (which then exits).
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except OSError:
            mine.close()
            theirs.close()
            return
        if pid == 0:
            try:
                mine.close()
                if os.fork() == 0:
                    spare_main(theirs)
            finally:
                os._exit(0)
        theirs.close()
        reap(pid)
        mine.settimeout(10)
        try:
            gpid = int(mine.recv(64))
            socket.send_fds(ctl, [json.dumps({'spare': gpid}).encode()], [mine.fileno()])
        except (OSError, ValueError):
            pass
        mine.close()

    copied = probe()
    make_spare()
    send({'ready': {'python': sys.version.split()[0], 'modules': sorted(preloaded), 'failed': failed}})

    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 8)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)
        m = json.loads(msg)
        if 'ping' in m:
            r = {'pong': m['ping']}
            now = snapshot()
            if now != baseline:
                r['error'] = 'inherited limits changed: %r, was %r' % (now, baseline)
            else:
                # After a reset nothing of the last execution runs: a
                # spare made now has seen none of it.
                make_spare()
            send(r)
            continue
        rid = m.get('id')
        if not servable(m, fds):
            for fd in fds:
                os.close(fd)
            send({'id': rid, 'error': 'bad request'})
            continue
        try:
            pid = os.fork()
        except OSError as e:
            for fd in fds:
                os.close(fd)
            send({'id': rid, 'error': 'fork: %s' % e})
            continue
        if pid == 0:
            # The intermediate: fork the child and exit, so that the child's
            # parent is the agent, which reaps it.
            try:
                try:
                    gpid = os.fork()
                except OSError as e:
                    send({'id': rid, 'error': 'fork: %s' % e})
                    os._exit(0)
                if gpid == 0:
                    try:
                        ctl.close()
                        prepare()
                        child(m, fds)
                    finally:
                        os._exit(70)
                send({'id': rid, 'pid': gpid})
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        reap(pid)
_corral_zygote()
