package lang

// pythonWrapper compiles the code first, so a syntax error is reported as a
// compile error by the same interpreter that would run it (no second start),
// then runs it as __main__ in a fresh namespace with tracebacks that show the
// user's lines and none of the wrapper's. It imports nothing beyond what
// the interpreter has already loaded.
const pythonWrapper = `import sys, os
class _CorralSource:
    # linecache asks a module's __loader__ for source it cannot find on
    # disk; tracebacks then show the user's lines without importing
    # linecache (and tokenize, re) up front.
    def __init__(self, src):
        self.src = src
    def get_source(self, name):
        return self.src.decode('utf-8', 'replace')
def _corral_load():
    with open(sys.argv[1], 'rb') as f:
        src = f.read()
    try:
        code = compile(src, 'main.py', 'exec', dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        import traceback
        traceback.print_exception(type(e), e, None)
        sys.stderr.flush()
        os.write(3, b'compile_error')
        os._exit(1)
    os.close(3)
    mod = type(sys)('__main__')
    mod.__file__ = 'main.py'
    mod.__loader__ = _CorralSource(src)
    mod.__builtins__ = __builtins__
    sys.modules['__main__'] = mod
    sys.argv = ['main.py']
    return code, mod.__dict__
_corral_code, _corral_globals = _corral_load()
del _corral_load, _CorralSource
try:
    exec(_corral_code, _corral_globals)
except SystemExit:
    raise
except BaseException as e:
    e = e.with_traceback(e.__traceback__.tb_next)
    if sys.excepthook is sys.__excepthook__:
        # The Python printer, unlike the C one, finds source lines through
        # the module's __loader__.
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__)
    else:
        sys.excepthook(type(e), e, e.__traceback__)
    sys.exit(1)
`

type python struct{}

func (python) Name() string { return "python" }

func (python) Plan(code string) Plan {
	file := CodeDir + "/main.py"
	return Plan{
		Files: []File{{Path: file, Content: []byte(code), Mode: 0o644}},
		Run: Step{
			Argv:     []string{"python3", "-c", pythonWrapper, file},
			Env:      []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0"},
			StatusFD: true,
		},
	}
}

func init() { Register(python{}, "python3", "py") }

// MissingModule reports the top-level module of a ModuleNotFoundError.
func (python) MissingModule(stderr string) (string, bool) { return missingPython(stderr) }
