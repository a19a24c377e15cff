# Tests of corral_proto.py's forking helpers, with real processes. Run by
# TestPythonUnits (python_units_test.go), or alone from this directory:
# /usr/bin/python3 -B -m unittest corral_proto_test
import ctypes, json, os, unittest

import corral_proto

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


# Make this process a subreaper, as the agent is the sandbox's init: a
# process forked through an intermediate becomes its child.
def become_subreaper():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'prctl(PR_SET_CHILD_SUBREAPER)')


# Whether fd is open in this process.
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


class ForkThrough(unittest.TestCase):

    def setUp(self):
        become_subreaper()

    # The new process runs child with the request's fds, which are closed
    # here; the intermediate reports its pid and is reaped; the new
    # process is ours to reap (once the intermediate exits, its parent is
    # this process, the subreaper, as it is the agent in a sandbox).
    def test_forks_through_an_intermediate(self):
        msgs_r, msgs_w = os.pipe()
        out_r, out_w = os.pipe()
        req_r, req_w = os.pipe()  # stands for a request's fd

        def send(m):
            os.write(msgs_w, (json.dumps(m) + '\n').encode())

        def child():
            os.write(out_w, b'%d %d' % (os.getpid(), is_open(req_w)))
            os._exit(7)

        corral_proto.fork_through(42, [req_w], send, child)
        self.assertFalse(is_open(req_w), 'the request fd is still open in the forking process')
        os.close(msgs_w)
        os.close(out_w)
        msgs = [json.loads(line) for line in os.read(msgs_r, 4096).decode().splitlines()]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertEqual(set(msgs[0]), {corral_proto.KEY_ID, corral_proto.KEY_PID})
        self.assertEqual(msgs[0][corral_proto.KEY_ID], 42)
        pid = msgs[0][corral_proto.KEY_PID]
        _, status = os.waitpid(pid, 0)
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7, status)
        self.assertEqual(os.read(out_r, 64).decode().split(), [str(pid), '1'])
        # The intermediate was reaped by fork_through: nothing else is left.
        with self.assertRaises(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)
        for fd in (msgs_r, out_r, req_r):
            os.close(fd)


class Reap(unittest.TestCase):

    def test_waits_for_a_child(self):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        corral_proto.reap(pid)
        with self.assertRaises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)

    # A pid that is not a child (reaped already) returns at once.
    def test_returns_for_a_process_that_is_not_a_child(self):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        corral_proto.reap(pid)


class CloseFds(unittest.TestCase):

    def test_closes_each(self):
        r, w = os.pipe()
        corral_proto.close_fds([r, w])
        self.assertFalse(is_open(r) or is_open(w))

    def test_none(self):
        corral_proto.close_fds([])


if __name__ == '__main__':
    unittest.main()
