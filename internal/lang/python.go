package lang

// pythonWrapper compiles the code first, so a syntax error is reported as a
// compile error by the same interpreter that would run it (no second start),
// then runs it as __main__ in a fresh namespace with tracebacks that show the
// user's lines and none of the wrapper's.
const pythonWrapper = `import sys, os
def _corral_load():
    import builtins, linecache, types
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
    text = src.decode('utf-8', 'replace')
    linecache.cache['main.py'] = (len(text), None, text.splitlines(True), 'main.py')
    mod = types.ModuleType('__main__')
    mod.__file__ = 'main.py'
    mod.__builtins__ = builtins
    sys.modules['__main__'] = mod
    sys.argv = ['main.py']
    return code, mod.__dict__
_corral_code, _corral_globals = _corral_load()
del _corral_load
try:
    exec(_corral_code, _corral_globals)
except SystemExit:
    raise
except BaseException as e:
    e = e.with_traceback(e.__traceback__.tb_next)
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
