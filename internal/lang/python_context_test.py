# Tests of python_context.py's parts, loaded as a module (its entry point
# runs only as __main__). The runner as a whole is tested through
# internal/kernel. Run by TestPythonUnits (python_units_test.go), or alone
# from this directory: /usr/bin/python3 -B -m unittest python_context_test
import ast, json, os, select, socket, sys, unittest

import corral_proto
import python_context as c


# Run fn(state) in a child whose raw stdout and stderr are pipes and whose
# events go to a pipe, as a context's do; returns the events, the raw
# stdout and stderr, and the child's exit status.
def in_context(fn):
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(pipes[1][1], c.STDOUT_FD)
            os.dup2(pipes[2][1], c.STDERR_FD)
            state = c.STATE
            state.events = pipes[0][1]
            c.start_context(state)
            fn(state)
            os._exit(0)
        finally:
            os._exit(1)
    for _, w in pipes:
        os.close(w)
    out = read_all([r for r, _ in pipes])
    _, status = os.waitpid(pid, 0)
    events = [json.loads(line) for line in out[0].decode().splitlines()]
    return events, out[1], out[2], status


# Read each of fds to its end, all at once (a writer may fill one pipe
# while the others wait); closes them.
def read_all(fds):
    out = {fd: b'' for fd in fds}
    open_fds = list(fds)
    while open_fds:
        for fd in select.select(open_fds, [], [])[0]:
            b = os.read(fd, 1 << 16)
            if b:
                out[fd] += b
            else:
                open_fds.remove(fd)
                os.close(fd)
    return [out[fd] for fd in fds]


class Display(unittest.TestCase):

    def test_ends_with_semicolon(self):
        got = [c.ends_with_semicolon(code, ast.parse(code).body[-1])
               for code in ('x', 'x;', 'x ; # c', 'f(";")', 'é;', 'x # ;')]
        self.assertEqual(got, [False, True, True, False, True, False])

    def test_mime_text(self):
        got = [c.mime_text('image/png', b'\x89P'), c.mime_text('text/html', b'<b>'),
               c.mime_text('application/json', {'a': [1]}), c.mime_text('text/plain', 3)]
        self.assertEqual(got, ['iVA=', '<b>', '{"a": [1]}', '3'])

    def test_mime_bundle(self):
        class R:
            def _repr_html_(self):
                return '<b>'

            def _repr_latex_(self):
                return None

            def __repr__(self):
                return 'R()'

        # An object that makes up every attribute has no display methods.
        class Anything:
            def __getattr__(self, name):
                return lambda *a, **k: 'x'

            def __repr__(self):
                return 'M()'

        class Bundle:
            def _repr_mimebundle_(self, include, exclude):
                return {'text/plain': 'b', 'image/png': b'\x00'}, {}

        self.assertEqual(c.mime_bundle(R()), {'text/html': '<b>', 'text/plain': 'R()'})
        self.assertEqual(c.mime_bundle(Anything()), {'text/plain': 'M()'})
        self.assertEqual(c.mime_bundle(Bundle()), {'text/plain': 'b', 'image/png': 'AA=='})

    def test_image_format(self):
        got = [c.image_format(b'\x89PNG\r\n\x1a\n', None), c.image_format(b'\xff\xd8\xff', None),
               c.image_format(None, 'a.JPG')]
        self.assertEqual(got, ['png', 'jpeg', 'jpg'])

    def test_ipython_shim(self):
        package, module = c.ipython_shim()
        self.assertIs(package.display, module)
        self.assertIs(module.display, c.display)
        self.assertEqual(c.mime_bundle(module.HTML('<i>')), {'text/html': '<i>',
                                                             'text/plain': '<IPython.core.display.HTML object>'})


class Events(unittest.TestCase):

    # Text goes out a line at a time, each event a JSON line naming its cell.
    def test_event_stream_lines(self):
        def write(state):
            state.cell = 9
            for x in ('a', 'b\nc', '\n', 'd'):
                sys.stdout.write(x)
        events, _, _, status = in_context(write)
        self.assertEqual(status, 0)
        self.assertEqual(events, [{'type': 'stdout', 'text': 'ab\n', 'cell': 9}, {'type': 'stdout', 'text': 'c\n', 'cell': 9}])

    # Text without a newline goes out once MAX_PENDING_TEXT waits, or at a
    # flush.
    def test_event_stream_bound(self):
        def write(state):
            sys.stderr.write('x' * c.MAX_PENDING_TEXT + 'y')
            sys.stderr.write('z')
            sys.stderr.flush()
        events, _, _, status = in_context(write)
        self.assertEqual(status, 0)
        self.assertEqual([(e['type'], len(e['text'])) for e in events],
                         [('stderr', c.MAX_PENDING_TEXT + 1), ('stderr', 1)])

    def test_error_event(self):
        self.assertEqual(c.error_event(ZeroDivisionError('division by zero')),
                         {'type': 'error', 'name': 'ZeroDivisionError', 'value': 'division by zero',
                          'traceback': ['ZeroDivisionError: division by zero\n']})

    # A cell's events, in order: its number, its text, its main result, its
    # end; the raw streams get the end marker.
    def test_run_cell(self):
        def run(state):
            c.run_cell(state, {'cell': 5, 'code': "print('hi')\n1 + 1"})
        events, out, err, status = in_context(run)
        self.assertEqual(status, 0)
        self.assertEqual(events, [
            {'type': 'number_of_executions', 'execution_count': 1, 'cell': 5},
            {'type': 'stdout', 'text': 'hi\n', 'cell': 5},
            {'type': 'result', 'data': {'text/plain': '2'}, 'is_main_result': True, 'cell': 5},
            {'type': 'end_of_execution', 'cell': 5},
        ])
        self.assertEqual(out, c.RAW_END_MARK % 5)
        self.assertEqual(err, c.RAW_END_MARK % 5)

    # An error's traceback shows the cell's frames, not the runner's.
    def test_run_cell_error(self):
        def run(state):
            c.run_cell(state, {'cell': 6, 'code': 'def f():\n    return 1 / 0\nf()'})
        events, _, _, status = in_context(run)
        self.assertEqual(status, 0)
        self.assertEqual([e['type'] for e in events], ['number_of_executions', 'error', 'end_of_execution'])
        error = events[1]
        self.assertEqual((error['name'], error['value']), ('ZeroDivisionError', 'division by zero'))
        self.assertTrue(error['traceback'][0].startswith('Traceback'), error['traceback'])
        self.assertIn('<cell 1>', ''.join(error['traceback']))
        self.assertNotIn('python_context', ''.join(error['traceback']))


class Control(unittest.TestCase):

    def setUp(self):
        self.state = c.State()
        self.state.ctl, self.agent = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def tearDown(self):
        self.state.ctl.close()
        self.agent.close()

    def recv(self):
        return json.loads(self.agent.recv(corral_proto.MAX_MESSAGE))

    def test_ping(self):
        self.agent.send(json.dumps({corral_proto.KEY_PING: 4}).encode())
        self.assertTrue(c.serve_control(self.state, fresh=True))
        self.assertEqual(self.recv(), {corral_proto.KEY_PONG: 4})

    # A fork request without "zygote" or with other fds than a context's is
    # refused, and its fds closed.
    def test_not_a_context_request(self):
        r, w = os.pipe()
        socket.send_fds(self.agent, [json.dumps({corral_proto.KEY_ID: 5, corral_proto.KEY_ZYGOTE: True}).encode()], [r])
        os.close(r)
        self.assertTrue(c.serve_control(self.state, fresh=True))
        self.assertEqual(self.recv(), {corral_proto.KEY_ID: 5, corral_proto.KEY_ERROR: 'not a context request'})
        with self.assertRaises(BrokenPipeError):  # no read end is left open
            os.write(w, b'x')
        os.close(w)

    def test_closed(self):
        self.agent.close()
        self.assertFalse(c.serve_control(self.state, fresh=True))


class Enter(unittest.TestCase):

    # A fresh context takes the request's environment and directory, and
    # its PYTHONPATH first; a directory it cannot enter is an error.
    def test_enter(self):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                errors = [c.enter({corral_proto.KEY_ENV: ['A=1', 'PYTHONPATH=/x:/y'], corral_proto.KEY_DIR: '/tmp'}),
                          c.enter({corral_proto.KEY_DIR: '/corral/missing'})]
                os.write(w, json.dumps([errors, os.getcwd(), dict(os.environ), sys.path[:2]]).encode())
            finally:
                os._exit(0)
        os.close(w)
        got = json.loads(os.read(r, 1 << 16))
        os.close(r)
        os.waitpid(pid, 0)
        self.assertEqual(got, [[None, 'chdir: No such file or directory'], '/tmp', {}, ['/x', '/y']])


if __name__ == '__main__':
    unittest.main()
