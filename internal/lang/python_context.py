# Corral's python code context runner: notebook-style contexts in which
# cells run one after another in one namespace.
#
# The host side is internal/kernel (its package comment has the whole
# picture). The agent starts this file as a zygote, `python3 -c <this file>
# root`, with a control socket on fd 3 (the zygote protocol,
# internal/agent/proto.go and zygote_via.go). The processes it runs as:
#
#   the root     imports what every context needs, then forks a fresh
#                context for each request on its control socket (serve_root);
#   a context    a fork of the root: it takes the request's environment and
#                directory, reads cells from its request stream and writes
#                events to its event stream (serve_context); it is a zygote
#                too: a fork request on its own control socket makes a copy
#                of it, state and all (fork_context), which serves on from
#                there with new streams.
#
# A fork request brings, with SCM_RIGHTS, the new process's stdin (the
# request stream), stdout and stderr (the raw output of the process and its
# subprocesses), its status fd (the event stream) and its control socket.
#
# Requests, one JSON object per line: {"cell": CELL, "code": "..."}. Events,
# one JSON object per line, each with the "cell" it belongs to:
#   {"type": "number_of_executions", "execution_count": N}   first
#   {"type": "stdout" | "stderr", "text": "..."}             print, sys.stdout
#   {"type": "result", "data": {MIME: text}, "is_main_result": bool}
#   {"type": "error", "name": "...", "value": "...", "traceback": [...]}
#   {"type": "end_of_execution"}                              last
# Binary MIME data (image/png, image/jpeg, application/pdf) is base64.
import sys, os, io, gc, json, socket, signal, ast, builtins, binascii, linecache, traceback, select, _thread
# The zygote protocol, beside this file or delivered with it by Go
# (internal/lang/python_modules.go): the root's control socket is its
# CONTROL_FD, a child that cannot become a context exits EXIT_SETUP_FAILED.
from corral_proto import (CONTROL_FD, MAX_MESSAGE, MAX_FDS, EXIT_SETUP_FAILED, KEY_ID, KEY_ENV, KEY_DIR, KEY_PING,
                          KEY_PONG, KEY_READY, KEY_ERROR, KEY_ZYGOTE, close_fds, fork_through)

# A fork request's fds: stdin (requests), stdout, stderr, status (events),
# control socket.
FORK_FD_COUNT = 5
FORK_STDIN, FORK_STDOUT, FORK_STDERR, FORK_STATUS, FORK_CONTROL = range(FORK_FD_COUNT)
STDIN_FD, STDOUT_FD, STDERR_FD = 0, 1, 2

# A request stream is read in chunks of this size.
READ_SIZE = 1 << 16

# Text written to sys.stdout or sys.stderr is sent a line at a time: up to
# the last newline of each write, the rest when a newline follows, when the
# stream is flushed, before any other event, at the end of the cell, or
# when this much is waiting.
MAX_PENDING_TEXT = 1 << 16

# At the end of each cell, after the interpreter's own buffers are
# flushed, this marker (with the cell's id) goes to the process's raw stdout
# and stderr: the host waits for it, so that what subprocesses wrote during
# the cell arrives before the cell's end, although it travels on other
# pipes than the events. The host finds it by its start (internal/kernel's
# rawEndMark; TestPythonRawEndMark checks that it finds this one).
RAW_END_MARK = b'\x00corral-end:%d\x00'

# Cells are compiled under this name, with their number, so that
# tracebacks say which cell a line is in (and find its source in linecache).
CELL_FILENAME = '<cell %d>'
CELL_FILENAME_PREFIX = '<cell '

# The display protocol (IPython's): methods an object may define, each
# giving one MIME type of its representation, in IPython's order.
REPR_METHODS = (
    ('text/html', '_repr_html_'),
    ('text/markdown', '_repr_markdown_'),
    ('image/svg+xml', '_repr_svg_'),
    ('image/png', '_repr_png_'),
    ('image/jpeg', '_repr_jpeg_'),
    ('text/latex', '_repr_latex_'),
    ('application/json', '_repr_json_'),
    ('application/javascript', '_repr_javascript_'),
    ('application/pdf', '_repr_pdf_'),
)
MIMEBUNDLE_METHOD = '_repr_mimebundle_'
# MIME types whose data is binary, sent base64.
BINARY_MIME = ('image/png', 'image/jpeg', 'application/pdf')
# An attribute no object has: one that claims to have it answers every
# getattr (a mock, a proxy) and its _repr_*_ "methods" are not real ones.
CANARY_ATTRIBUTE = '_ipython_canary_method_should_not_exist_'

# matplotlib finds our backend by this name (MPLBACKEND=module://NAME, set
# by the host: internal/lang's ContextEnv, TestPythonSharedWithGo): a module made on import (BackendFinder), whose show() sends
# each open figure as image/png and closes it.
MPL_BACKEND_MODULE = 'corral_inline'
MPL_BACKEND = 'module://' + MPL_BACKEND_MODULE
MPL_BACKEND_SOURCE = '''
from matplotlib.backends.backend_agg import FigureCanvasAgg as FigureCanvas
from matplotlib.backend_bases import FigureManagerBase as FigureManager


def show(*args, **kwargs):
    _corral_show_figures()
'''
FIGURE_FORMAT = 'png'
FIGURE_BBOX = 'tight'


# The state of this process: the streams it talks on and the cell it runs.
class State:

    def __init__(self):
        self.ctl = None         # control socket
        self.requests = -1      # request stream fd
        self.events = -1        # event stream fd
        self.pending = b''      # request bytes before the next newline
        self.cell = 0           # the running (or last) cell's id
        self.execution_count = 0
        self.executing = False  # a cell's code runs: SIGINT interrupts it
        self.starting = False   # a cell was taken, its code not yet run: SIGINT is noted
        self.emitting = False   # an event is being written: SIGINT waits
        self.interrupted = False
        self.lock = _thread.allocate_lock()  # one event written at a time
        self.namespace = None   # the cell's globals: __main__'s dict
        self.stdout = None
        self.stderr = None


STATE = State()


# Events.

# Write one event of the running cell. SIGINT does not interrupt a write
# (half an event would break the stream): it is noted, and raised here
# once the event is out.
def emit(state, event):
    event['cell'] = state.cell
    data = (json.dumps(event) + '\n').encode()
    with state.lock:
        state.emitting = True
        try:
            write_all(state.events, data)
        finally:
            state.emitting = False
    if state.interrupted and state.executing:
        state.interrupted = False
        raise KeyboardInterrupt


# Write all of data to fd (a pipe write may be cut short by a signal).
def write_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# SIGINT in a context: a KeyboardInterrupt in the running cell; nothing
# when no cell runs. While a cell is starting (the host may interrupt it as
# soon as it hears its number_of_executions), while an event is written, or
# while the runner itself starts or ends the cell (execute's own frame), it
# is noted instead, and raised by the next event or the cell's start.
def on_sigint(signum, frame):
    state = STATE
    if not state.executing:
        if state.starting:
            state.interrupted = True
        return
    if state.emitting or frame is None or frame.f_code is execute.__code__:
        state.interrupted = True
        return
    raise KeyboardInterrupt


# sys.stdout and sys.stderr in a context: text becomes stdout / stderr
# events on the event stream, in order with results and errors. fileno() is
# the process's own fd, so a subprocess given sys.stdout writes raw output.
class EventStream(io.TextIOBase):

    def __init__(self, state, kind, fd):
        self.state = state
        self.kind = kind
        self.fd = fd
        self.text = []
        self.size = 0

    @property
    def encoding(self):
        return 'utf-8'

    @property
    def name(self):
        return '<%s>' % self.kind

    def writable(self):
        return True

    def isatty(self):
        return False

    def fileno(self):
        return self.fd

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError('write() argument must be str, not %s' % type(s).__name__)
        if not s:
            return 0
        self.text.append(s)
        self.size += len(s)
        if '\n' in s or self.size >= MAX_PENDING_TEXT:
            self.send(self.size >= MAX_PENDING_TEXT)
        return len(s)

    def flush(self):
        self.send(True)

    # Send what is waiting: all of it, or up to its last newline.
    def send(self, everything):
        if not self.text:
            return
        text = ''.join(self.text)
        cut = len(text) if everything else text.rfind('\n') + 1
        rest = text[cut:]
        self.text = [rest] if rest else []
        self.size = len(rest)
        if cut:
            emit(self.state, {'type': self.kind, 'text': text[:cut]})


# Send what sys.stdout and sys.stderr hold, before another event.
def flush_text(state):
    for stream in (state.stdout, state.stderr):
        if stream is not None:
            stream.send(True)


# The display protocol.

# The MIME bundle of obj: what its _repr_mimebundle_ and _repr_*_ methods
# give, and text/plain (its repr) unless those gave it.
def mime_bundle(obj):
    data = {}
    bundle = call_repr(obj, MIMEBUNDLE_METHOD, include=None, exclude=None)
    if isinstance(bundle, tuple) and bundle:
        bundle = bundle[0]
    if isinstance(bundle, dict):
        for mime, value in bundle.items():
            if isinstance(mime, str) and value is not None:
                data[mime] = mime_text(mime, value)
    for mime, method in REPR_METHODS:
        if mime in data:
            continue
        value = call_repr(obj, method)
        if isinstance(value, tuple) and value:
            value = value[0]  # (data, metadata)
        if value is not None:
            data[mime] = mime_text(mime, value)
    if 'text/plain' not in data:
        data['text/plain'] = plain_text(obj)
    return data


# obj's display method name, called; None if it has none or it fails (a
# failure is reported on stderr, as IPython does, and the rest of the
# bundle still goes out).
def call_repr(obj, name, **kwargs):
    method = real_method(obj, name)
    if method is None:
        return None
    try:
        return method(**kwargs)
    except Exception as e:
        sys.stderr.write('%s of %s failed: %s: %s\n' % (name, type(obj).__name__, type(e).__name__, e))
        return None


# The bound method name of obj, or None: classes (whose methods are unbound)
# and objects that make up every attribute have none.
def real_method(obj, name):
    if isinstance(obj, type):
        return None
    try:
        if getattr(obj, CANARY_ATTRIBUTE, None) is not None:
            return None
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


# A MIME type's data as the text an event carries: base64 for binary types,
# JSON for JSON types, str for the rest.
def mime_text(mime, value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        if mime in BINARY_MIME:
            return binascii.b2a_base64(bytes(value), newline=False).decode('ascii')
        return bytes(value).decode('utf-8', 'replace')
    if isinstance(value, str):
        return value
    if mime == 'application/json' or mime.endswith('+json'):
        return json.dumps(value, default=repr)
    return str(value)


# text/plain: the object's repr, or a note that it failed.
def plain_text(obj):
    try:
        return repr(obj)
    except Exception as e:
        return '<%s object (repr failed: %s: %s)>' % (type(obj).__name__, type(e).__name__, e)


# Send data (a MIME bundle) as a result of the running cell.
def emit_result(state, data, main=False):
    flush_text(state)
    event = {'type': 'result', 'data': data}
    if main:
        event['is_main_result'] = True
    emit(state, event)


# display(*objs): each object's MIME bundle as a result; raw=True takes
# each object as a bundle already. The builtin, and IPython.display's.
def display(*objs, include=None, exclude=None, metadata=None, transient=None, display_id=None, raw=False,
            clear=False, **kwargs):
    for obj in objs:
        if raw and isinstance(obj, dict):
            data = {str(k): mime_text(str(k), v) for k, v in obj.items() if v is not None}
        else:
            data = mime_bundle(obj)
        emit_result(STATE, data)


# IPython.display, for code written for notebooks, where IPython is not
# installed: display and the usual display objects, which the display
# protocol above shows.
class DisplayObject:
    mime_method = None

    def __init__(self, data=None, url=None, filename=None, metadata=None, **kwargs):
        if filename is not None and data is None:
            with open(filename, 'rb' if self.binary() else 'r') as f:
                data = f.read()
        self.data = data
        self.url = url
        self.filename = filename
        self.metadata = metadata

    def binary(self):
        return False

    def __repr__(self):
        return '<IPython.core.display.%s object>' % type(self).__name__


class HTML(DisplayObject):
    def _repr_html_(self):
        return self.data


class Markdown(DisplayObject):
    def _repr_markdown_(self):
        return self.data


class Latex(DisplayObject):
    def _repr_latex_(self):
        return self.data


class SVG(DisplayObject):
    def _repr_svg_(self):
        return self.data


class Javascript(DisplayObject):
    def _repr_javascript_(self):
        return self.data


class JSON(DisplayObject):
    def _repr_json_(self):
        return self.data


# PNG and JPEG files start with these bytes.
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
JPEG_SIGNATURE = b'\xff\xd8'


class Image(DisplayObject):
    def __init__(self, data=None, url=None, filename=None, format=None, metadata=None, **kwargs):
        if isinstance(data, str) and filename is None and url is None and os.path.exists(data):
            data, filename = None, data
        super().__init__(data, url, filename, metadata)
        self.format = (format or '').lower() or image_format(self.data, filename)

    def binary(self):
        return True

    def _repr_png_(self):
        return self.data if self.format == 'png' else None

    def _repr_jpeg_(self):
        return self.data if self.format in ('jpeg', 'jpg') else None


# The format of image data (by its signature) or of its file (by its name).
def image_format(data, filename):
    if isinstance(data, bytes):
        if data.startswith(PNG_SIGNATURE):
            return 'png'
        if data.startswith(JPEG_SIGNATURE):
            return 'jpeg'
    if filename:
        return filename.rsplit('.', 1)[-1].lower()
    return 'png'


def clear_output(wait=False):
    pass


# The IPython and IPython.display modules of the shim.
def ipython_shim():
    package = type(sys)('IPython')
    package.__path__ = []
    package.get_ipython = lambda: None
    module = type(sys)('IPython.display')
    for name, value in (('display', display), ('clear_output', clear_output), ('DisplayObject', DisplayObject),
                        ('HTML', HTML), ('Markdown', Markdown), ('Latex', Latex), ('SVG', SVG),
                        ('Javascript', Javascript), ('JSON', JSON), ('Image', Image)):
        setattr(module, name, value)
    package.display = module
    return package, module


# Whether the real IPython can be imported.
def ipython_installed():
    import importlib.util
    try:
        return importlib.util.find_spec('IPython') is not None
    except (ImportError, ValueError):
        return False


# matplotlib.

# Makes the module MPL_BACKEND_MODULE when matplotlib imports it.
class BackendFinder:

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != MPL_BACKEND_MODULE:
            return None
        import importlib.util
        return importlib.util.spec_from_loader(name, cls)

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        module._corral_show_figures = show_figures
        exec(compile(MPL_BACKEND_SOURCE, '<corral matplotlib backend>', 'exec'), module.__dict__)


# Send every open figure of pyplot as a result (image/png) and close it:
# plt.show(), and the end of each cell, as Jupyter's inline backend does.
# Nothing when matplotlib is not in use, or uses another backend.
def show_figures():
    plt = sys.modules.get('matplotlib.pyplot')
    helpers = sys.modules.get('matplotlib._pylab_helpers')
    if plt is None or helpers is None or plt.get_backend() != MPL_BACKEND:
        return
    for manager in helpers.Gcf.get_all_fig_managers():
        figure = manager.canvas.figure
        buf = io.BytesIO()
        figure.savefig(buf, format=FIGURE_FORMAT, bbox_inches=FIGURE_BBOX)
        emit_result(STATE, {'image/png': mime_text('image/png', buf.getvalue()), 'text/plain': plain_text(figure)})
    plt.close('all')


# Cells.

# Run one request: its code as a cell, then its events' end.
def run_cell(state, request):
    state.cell = request.get('cell', 0)
    state.execution_count += 1
    state.starting = True
    emit(state, {'type': 'number_of_executions', 'execution_count': state.execution_count})
    error = execute(state, request.get('code', ''))
    if error is not None:
        emit_error(state, error)
    try:
        flush_text(state)
    except Exception as e:
        emit_error(state, e)
    mark_raw_streams(state)
    emit(state, {'type': 'end_of_execution'})


# Write the cell's end marker to the raw stdout and stderr (a cell that
# closed or redirected them gets none: the host waits a little, then ends
# the cell without it).
def mark_raw_streams(state):
    flush_raw_streams()
    for fd in (STDOUT_FD, STDERR_FD):
        try:
            write_all(fd, RAW_END_MARK % state.cell)
        except OSError:
            pass


# Run code, and show the figures it left open; returns the exception that
# ended it, or None. SIGINT raises KeyboardInterrupt only while code runs
# (on_sigint), not in this function's own frame.
def execute(state, code):
    error = None
    state.executing = True
    state.starting = False
    try:
        run_code(state, code)
        show_figures()
    except BaseException as e:
        error = e
    state.executing = False
    state.interrupted = False
    return error


# Run code in the context's namespace. When its last statement is an
# expression, that expression's value (unless None, or the line ends with
# ';') is the cell's main result and '_'.
def run_code(state, code):
    if state.interrupted:
        state.interrupted = False
        raise KeyboardInterrupt
    filename = CELL_FILENAME % state.execution_count
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    tree = ast.parse(code, filename, 'exec')
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body.pop()
    ns = state.namespace
    if tree.body:
        exec(compile(tree, filename, 'exec', dont_inherit=True), ns)
    if last is None:
        return
    value = eval(compile(ast.Expression(last.value), filename, 'eval', dont_inherit=True), ns)
    if value is None or ends_with_semicolon(code, last):
        return
    ns['_'] = value
    emit_result(state, mime_bundle(value), main=True)


# Whether the statement node, the last in code, is followed by ';' (which
# hides a cell's value, as in IPython).
def ends_with_semicolon(code, node):
    lines = code.splitlines()
    if node.end_lineno is None or node.end_lineno > len(lines):
        return False
    line = lines[node.end_lineno - 1].encode('utf-8')  # offsets count bytes
    after = line[node.end_col_offset:].decode('utf-8', 'replace').lstrip()
    return after.startswith(';')


# Send e as the cell's error, with a traceback of the cell's frames and
# what they called (not the runner's).
def emit_error(state, e):
    flush_text_quietly(state)
    emit(state, error_event(e))


# Flush the text streams, dropping what cannot be sent (a stream whose
# send was interrupted is sent again at the cell's end).
def flush_text_quietly(state):
    try:
        flush_text(state)
    except BaseException:
        pass


def error_event(e):
    tb = e.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith(CELL_FILENAME_PREFIX):
        tb = tb.tb_next
    try:
        lines = traceback.format_exception(type(e), e, tb)
    except Exception:
        lines = ['%s: %s\n' % (type(e).__name__, plain_text(e))]
    try:
        value = str(e)
    except Exception:
        value = plain_text(e)
    return {'type': 'error', 'name': type(e).__name__, 'value': value, 'traceback': lines}


# The root.

# Load what every context needs once: the display builtin, the IPython shim
# (without IPython), the matplotlib backend's finder. Contexts inherit it.
def load_root():
    builtins.display = display
    if not ipython_installed():
        package, module = ipython_shim()
        sys.modules['IPython'] = package
        sys.modules['IPython.display'] = module
    sys.meta_path.append(BackendFinder)
    # The root's objects are never collected in a context: a collection
    # would write to (and so copy) every page that holds them.
    gc.collect()
    gc.freeze()
    # Signals: none should end the root or interrupt it mid-fork.
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2,
              signal.SIGPIPE):
        signal.signal(s, signal.SIG_IGN)


# Serve fork requests on the root's control socket: each makes a fresh
# context.
def serve_root(state):
    state.ctl = socket.socket(fileno=CONTROL_FD)
    send_control(state, {KEY_READY: {'python': sys.version.split()[0], 'pid': os.getpid()}})
    while True:
        if not serve_control(state, fresh=True):
            os._exit(0)


# Send m on the control socket.
def send_control(state, m):
    state.ctl.send(json.dumps(m).encode())


# Answer one control message (a ping, or a fork request). False when the
# agent closed the socket.
def serve_control(state, fresh):
    try:
        msg, fds, _, _ = socket.recv_fds(state.ctl, MAX_MESSAGE, MAX_FDS)
    except InterruptedError:
        return True
    if not msg:
        return False
    m = json.loads(msg)
    if KEY_PING in m:
        send_control(state, {KEY_PONG: m[KEY_PING]})
    else:
        fork_context(state, m, fds, fresh)
    return True


# Fork a context for the request m through a short-lived intermediate, so
# that its parent is the agent, which reaps it; the intermediate reports its
# pid. fresh: a new context from the root; else a copy of this one.
def fork_context(state, m, fds, fresh):
    rid = m.get(KEY_ID)
    if not m.get(KEY_ZYGOTE) or len(fds) != FORK_FD_COUNT:
        close_fds(fds)
        send_control(state, {KEY_ID: rid, KEY_ERROR: 'not a context request'})
        return
    flush_raw_streams()
    fork_through(rid, fds, lambda msg: send_control(state, msg), lambda: become_context(state, m, fds, fresh))


# Flush the interpreter's own stdout and stderr, so a fork does not carry
# (and later write twice) what they buffered.
def flush_raw_streams():
    for f in (sys.__stdout__, sys.__stderr__):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass


# In the forked child: take the request's streams, become a context (fresh:
# with the request's environment and directory, and a new namespace; else
# this context's state as it is), say ready and serve. A fresh context that
# cannot enter its directory says why in its ready message and exits.
def become_context(state, m, fds, fresh):
    try:
        old = (state.ctl, state.requests, state.events)
        install_streams(state, fds)
        if fresh:
            close_quietly(old[0])
            close_other_fds(state)
            os.setsid()
            error = enter(m)
            if error:
                send_control(state, {KEY_READY: {'error': error}})
                os._exit(EXIT_SETUP_FAILED)
            start_context(state)
        else:
            for closing in old:
                close_quietly(closing)
            os.setsid()
            # A thread of the cells (not in the copy) may have held it.
            state.lock = _thread.allocate_lock()
        send_control(state, {KEY_READY: {'pid': os.getpid(), 'execution_count': state.execution_count}})
        serve_context(state)
    finally:
        os._exit(EXIT_SETUP_FAILED)


# Make the request's fds this process's streams: raw stdout and stderr on 1
# and 2, /dev/null on 0 (a subprocess must not read the request stream),
# the rest kept where they arrived, not inherited by subprocesses.
def install_streams(state, fds):
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, STDIN_FD)
    os.dup2(fds[FORK_STDOUT], STDOUT_FD)
    os.dup2(fds[FORK_STDERR], STDERR_FD)
    for fd in (null, fds[FORK_STDOUT], fds[FORK_STDERR]):
        if fd > STDERR_FD:
            os.close(fd)
    for fd in (fds[FORK_STDIN], fds[FORK_STATUS], fds[FORK_CONTROL]):
        os.set_inheritable(fd, False)
    state.requests = fds[FORK_STDIN]
    state.events = fds[FORK_STATUS]
    state.ctl = socket.socket(fileno=fds[FORK_CONTROL])
    state.pending = b''


# In a fresh context: close every fd but stdio and the context's streams
# (the root's control socket among them).
def close_other_fds(state):
    keep = {STDIN_FD, STDOUT_FD, STDERR_FD, state.requests, state.events, state.ctl.fileno()}
    for name in os.listdir('/proc/self/fd'):
        fd = int(name)
        if fd not in keep:
            close_quietly(fd)


def close_quietly(f):
    try:
        if isinstance(f, int):
            if f >= 0:
                os.close(f)
        elif f is not None:
            f.close()
    except OSError:
        pass


# Take the request's environment and working directory; returns an error
# message, or None.
def enter(m):
    os.environ.clear()
    for kv in m.get(KEY_ENV) or []:
        k, _, v = kv.partition('=')
        os.environ[k] = v
    try:
        os.chdir(m.get(KEY_DIR) or '/')
    except OSError as e:
        return 'chdir: %s' % e.strerror
    # The root read PYTHONPATH when it started; the context's comes first.
    for entry in reversed(os.environ.get('PYTHONPATH', '').split(os.pathsep)):
        if entry:
            sys.path.insert(0, entry)
    return None


# A fresh context's own state: a new __main__ whose dict is the cells'
# namespace, sys.stdout and sys.stderr as event streams, SIGINT as
# KeyboardInterrupt, and the signals a fresh interpreter has.
def start_context(state):
    main = type(sys)('__main__')
    main.__builtins__ = builtins
    sys.modules['__main__'] = main
    state.namespace = main.__dict__
    sys.argv = ['']
    state.stdout = EventStream(state, 'stdout', STDOUT_FD)
    state.stderr = EventStream(state, 'stderr', STDERR_FD)
    sys.stdout, sys.stderr = state.stdout, state.stderr
    sys.stdin = open(os.devnull)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, on_sigint)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


# Serve the context: cells from the request stream, fork requests and pings
# from the control socket, until either closes. A fork returns here in the
# copy, whose state then names its own streams.
def serve_context(state):
    while True:
        readable, _, _ = select.select([state.requests, state.ctl], [], [])
        if state.ctl in readable:
            if not serve_control(state, fresh=False):
                os._exit(0)
            continue
        data = os.read(state.requests, READ_SIZE)
        if not data:
            os._exit(0)
        state.pending += data
        while b'\n' in state.pending:
            line, state.pending = state.pending.split(b'\n', 1)
            try:
                request = json.loads(line)
            except ValueError:
                continue
            run_cell(state, request)


# The entry point, run as `python3 -c <this file> root`.
def _corral_context():
    load_root()
    serve_root(STATE)


if __name__ == '__main__':
    _corral_context()
