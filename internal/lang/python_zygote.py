import sys, os
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
    preload = sys.argv[1:]
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
    send({'ready': {'python': sys.version.split()[0], 'modules': sorted(preloaded), 'failed': failed}})

    def child(m, fds):
        # Runs in the forked child: become what `python3 -c CODE ARGS` would
        # be in a fresh process, then run CODE and exit like the interpreter.
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        os.closerange(len(fds), 1 << 20)
        try:
            os.setsid()
            for s, h in dispositions.items():
                try:
                    signal.signal(s, h)
                except (OSError, ValueError, TypeError):
                    pass
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
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
        for name in unload:
            sys.modules.pop(name, None)
        np = sys.modules.get('numpy')
        if np is not None:
            try:
                np.random.seed()
            except Exception:
                pass
        main = type(sys)('__main__')
        main.__builtins__ = __builtins__
        sys.modules['__main__'] = main
        sys.argv = ['-c'] + argv[3:]
        code = 0
        try:
            exec(compile(argv[2], '<string>', 'exec'), main.__dict__)
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
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except BaseException:
                code = code or 120
        os._exit(code)

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
            send(r)
            continue
        rid = m.get('id')
        argv = m.get('argv') or []
        if len(argv) < 3 or argv[1] != '-c' or len(fds) not in (3, 4):
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
                        child(m, fds)
                    finally:
                        os._exit(70)
                send({'id': rid, 'pid': gpid})
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
_corral_zygote()
