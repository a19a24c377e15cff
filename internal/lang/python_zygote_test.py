# Tests of python_zygote.py's parts, loaded as a module (its entry point runs
# only as __main__). The zygote as a whole runs in python_zygote_test.go.
# Run by TestPythonUnits (python_units_test.go), or alone from this
# directory: /usr/bin/python3 -B -m unittest python_zygote_test
import ctypes, json, os, signal, sys, types, unittest

# First: the zygote notes which modules were loaded before its own imports.
import python_zygote as z
import corral_proto

# /proc/PID/pagemap's bits (python_zygote.py).
PRESENT = 1 << 63
EXCLUSIVE = 1 << 56


class Servable(unittest.TestCase):

    def test_requests(self):
        for m, fds, want in (
                ({'argv': ['python3', '-c', 'x']}, [0, 1, 2], True),
                ({'argv': ['python3', '-c', 'x', 'a', 'b']}, [0, 1, 2, 3], True),
                ({'argv': ['python3', '-c', 'x']}, [0, 1], False),
                ({'argv': ['python3', '-c', 'x']}, [0, 1, 2, 3, 4], False),
                ({'argv': ['python3', '-c']}, [0, 1, 2], False),
                ({'argv': ['python3', '-m', 'x']}, [0, 1, 2], False),
                ({'argv': None}, [0, 1, 2], False),
                ({}, [0, 1, 2], False),
        ):
            with self.subTest(m=m, fds=fds):
                self.assertEqual(z.servable(m, fds), want)


class ExitStatus(unittest.TestCase):

    def test_system_exit_status(self):
        self.assertEqual([z.system_exit_status(c) for c in (None, 0, 3, 256 + 7, -1, True)], [0, 0, 3, 7, 255, 1])

    # A SystemExit that is not a number is printed and is 1, as in the
    # interpreter: run in a child whose stderr is a pipe.
    def test_system_exit_message(self):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.dup2(w, 2)
            sys.stderr = open(2, 'w', closefd=False)
            code = z.system_exit_status('bye')
            sys.stderr.flush()
            os._exit(code)
        os.close(w)
        _, status = os.waitpid(pid, 0)
        self.assertEqual(os.read(r, 64), b'bye\n')
        os.close(r)
        self.assertEqual(os.WEXITSTATUS(status), z.EXIT_ERROR)


class Exit(unittest.TestCase):

    def test_clearing_order(self):
        names = {'b': 1, '_a': 2, '__doc__': 3, '__builtins__': 4, 'c': 5, '_z': 6, 7: 7}
        self.assertEqual(z.clearing_order(names), ['_a', '_z', 'b', '__doc__', 'c', 7])

    # flush_standard_streams: a stream that cannot flush (a pipe nobody
    # reads) makes a success EXIT_FLUSH_FAILED, and leaves a failure as it
    # is.
    def test_flush_failure(self):
        r, w = os.pipe()
        os.close(r)
        stdout = sys.stdout
        sys.stdout = open(w, 'w')
        try:
            got = []
            for code in (0, 3):
                sys.stdout.write('lost\n')
                got.append(z.flush_standard_streams(code))
        finally:
            broken, sys.stdout = sys.stdout, stdout
            try:
                broken.close()
            except OSError:
                pass
        self.assertEqual(got, [z.EXIT_FLUSH_FAILED, 3])
        self.assertEqual(z.flush_standard_streams(0), 0)


class Pages(unittest.TestCase):

    def test_in_use_mappings(self):
        maps = [
            '55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]',
            '7f0000000000-7f0000004000 rw-p 00000000 00:00 0 ',
            '7f0000004000-7f0000005000 r--p 00000000 08:01 123                        /usr/lib/libc.so.6',
            '7f0000005000-7f0000006000 rw-s 00000000 00:05 9                          /dev/zero (deleted)',
            '7f0000010000-7f0010011000 rw-p 00000000 00:00 0 ',  # more than MAX_MAPPING_IN_USE
            '7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]',
            '7ffc00100000-7ffc00102000 rw-p 00000000 00:00 0                          [vvar]',
            '',
        ]
        self.assertEqual(z.in_use_mappings(maps),
                         [(0x55d0c0a00000, 0x55d0c0a21000), (0x7f0000000000, 0x7f0000004000)])

    # This process's own mappings: some, each one a line of its maps.
    def test_writable_mappings(self):
        got = z.writable_mappings()
        self.assertTrue(got)
        with open('/proc/self/maps') as f:
            ranges = {tuple(int(x, 16) for x in line.split()[0].split('-')) for line in f}
        self.assertLessEqual(set(got), ranges)

    def test_exclusive_runs(self):
        entries = [PRESENT | EXCLUSIVE, PRESENT | EXCLUSIVE, PRESENT, 0, EXCLUSIVE, PRESENT | EXCLUSIVE]
        self.assertEqual(z.exclusive_runs(entries, 0x10000, 0x16000), [(0x10000, 0x12000), (0x15000, 0x16000)])

    def test_parse_report(self):
        self.assertEqual(z.parse_report(b'[[4096, 8192], [16384, 20480]]'), [(4096, 8192), (16384, 20480)])
        for b in (b'', b'not json', b'null', b'[[1]]', b'[["a", 2]]'):
            with self.subTest(report=b):
                self.assertEqual(z.parse_report(b), [])

    # A spare copies each run ahead in one madvise(start, size,
    # MADV_POPULATE_WRITE), with the zygote's typed function.
    def test_prefault(self):
        calls = []
        fake = types.SimpleNamespace(copied=z.sizes([(0x10000, 0x12000), (0x15000, 0x16000)]),
                                     madvise=lambda *a: calls.append(a))
        z.prefault(fake)
        self.assertEqual(calls, [(0x10000, 0x2000, z.MADV_POPULATE_WRITE), (0x15000, 0x1000, z.MADV_POPULATE_WRITE)])

    # The probe's report, written by report_copied in a child and read back
    # through a pipe by read_report, parses into runs.
    def test_report_round_trip(self):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            z.report_copied(w, z.writable_mappings())
            os._exit(0)
        os.close(w)
        data = z.read_report(r)
        os.close(r)
        os.waitpid(pid, 0)
        runs = z.parse_report(data)
        self.assertEqual(runs, [tuple(run) for run in json.loads(data)])
        self.assertTrue(all(lo < hi and lo % z.PAGE_SIZE == 0 for lo, hi in runs), runs)


class Start(unittest.TestCase):

    def test_import_preload(self):
        failed = z.import_preload(['json', 'corral_no_such_module'])
        self.assertEqual(len(failed), 1)
        self.assertTrue(failed[0].startswith('corral_no_such_module: '), failed)

    def test_current_umask(self):
        old = os.umask(0o027)
        try:
            self.assertEqual(z.current_umask(), 0o027)
            self.assertEqual(os.umask(0o027), 0o027)
        finally:
            os.umask(old)

    def test_signal_dispositions(self):
        d = z.signal_dispositions()
        self.assertIs(d[signal.SIGINT], signal.default_int_handler)
        self.assertNotIn(signal.SIGKILL, d)
        self.assertNotIn(signal.SIGSTOP, d)

    # The zygote blocks every signal but SIGCHLD (and those no process can
    # block), and changes no disposition: a process it forks has only to
    # empty its mask to start as a fresh interpreter does.
    def test_block_signals(self):
        def child(w):
            before = {s: signal.getsignal(s) for s in z.signal_dispositions()}
            z.block_signals()
            after = {s: signal.getsignal(s) for s in z.signal_dispositions()}
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
            return w, [sorted(int(s) for s in blocked), before == after]

        blocked, unchanged = in_child(child)
        want = signal.valid_signals() - {signal.SIGCHLD, signal.SIGKILL, signal.SIGSTOP}
        self.assertEqual(blocked, sorted(int(s) for s in want))
        self.assertTrue(unchanged)

    # restore_signals sets back what a preloaded module changed.
    def test_restore_signals(self):
        def child(w):
            d = z.signal_dispositions()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            z.restore_signals(d)
            return w, [signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
                       signal.getsignal(signal.SIGINT) is signal.default_int_handler]

        self.assertEqual(in_child(child), [True, True])


# Runs f() in a forked child, which writes its answer (JSON) to the fd f
# returns it on (f takes the write end of a pipe); returns the answer.
def in_child(f):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            out = f(w)
            os.write(out[0], json.dumps(out[1]).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b''
    while True:
        b = os.read(r, 1 << 16)
        if not b:
            break
        data += b
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


class Child(unittest.TestCase):

    # close_range works on every kernel this runs on (5.9 and later).
    def test_has_close_range(self):
        major, minor = (int(x) for x in os.uname().release.split('.')[:2])
        self.assertEqual(z.has_close_range(ctypes.CDLL(None, use_errno=True)), (major, minor) >= (5, 9))

    # A child keeps the request's fds, as 0 to 3, and the probe's report
    # fd after them, and nothing else; with close_range or by listing.
    def test_install_fds(self):
        for close_range in (True, False):
            zz = types.SimpleNamespace(libc=ctypes.CDLL(None, use_errno=True), close_range=close_range)

            def child(w):
                extra = [os.open('/dev/null', os.O_RDONLY) for _ in range(5)]
                os.dup2(extra[0], 200)
                req = [os.open('/dev/null', os.O_RDONLY) for _ in range(4)]
                report = z.install_fds(zz, req, w if w >= 4 else os.dup(w))
                open_fds = []
                for fd in range(256):
                    try:
                        os.fstat(fd)
                        open_fds.append(fd)
                    except OSError:
                        pass
                return report, open_fds

            self.assertEqual(in_child(child), [0, 1, 2, 3, 4], 'close_range=%s' % close_range)

    # A child's environment is the request's, in its order (a later
    # duplicate's value in the first's place), whether or not the zygote's
    # (A=1, B=2) was the same.
    def test_enter_environment(self):
        zz = types.SimpleNamespace(libc=ctypes.CDLL(None, use_errno=True), umask=0o022, env=['A=1', 'B=2'])
        for env in ([], ['A=1', 'B=2'], ['B=2', 'A=1'], ['A=1', 'B=2', 'A=3'], ['A=1=2', 'C=']):
            def child(w):
                os.environ.clear()
                os.environ.update({'A': '1', 'B': '2'})
                z.enter(zz, {'env': env, 'dir': '/'})
                getenv = zz.libc.getenv
                getenv.restype = ctypes.c_char_p
                a = getenv(b'A')
                return w, [list(os.environ.items()), a and a.decode(), os.getcwd()]

            want = {}
            for kv in env:
                k, _, v = kv.partition('=')
                want[k] = v
            got = in_child(child)
            self.assertEqual(got[0], [list(kv) for kv in want.items()], env)
            self.assertEqual(got[1], want.get('A'), env)  # the C environment too
            self.assertEqual(got[2], '/', env)


class Modules(unittest.TestCase):

    # corral_proto is one of the zygote's own modules, which no child finds
    # in sys.modules (the zygote takes them out at start), and the zygote's
    # names are its.
    def test_corral_proto_is_own(self):
        self.assertIn('corral_proto', z.OWN_MODULES)
        self.assertNotIn('corral_proto', z.FRESH_MODULES)
        self.assertIs(z.fork_through, corral_proto.fork_through)
        self.assertEqual(z.CONTROL_FD, corral_proto.CONTROL_FD)


if __name__ == '__main__':
    unittest.main()
