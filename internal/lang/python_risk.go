package lang

import "regexp"

// pythonModules start processes, load native code, open sockets, fork,
// deserialise code or import by name. A mention in an import, after
// "from", or as a quoted name (__import__("socket"), sys.modules['pty'])
// counts.
const pythonModules = `subprocess|_posixsubprocess|ctypes|_ctypes|cffi|socket|_socket|ssl|pty|multiprocessing|_multiprocessing|` +
	`pexpect|runpy|webbrowser|importlib|marshal|pickle|_pickle|dill|cloudpickle|shelve|` +
	`urllib|urllib3|http\.client|requests|httpx|aiohttp|ftplib|smtplib|telnetlib|xmlrpc|socketserver`

// pythonCalls are os (and posix) functions that start or fork processes or
// leave a session, found as an attribute (os.system, an alias's .system),
// in an import list, or quoted (getattr(os, "system")).
const pythonCalls = `system|popen|fork|forkpty|execl|execle|execlp|execlpe|execv|execve|execvp|execvpe|` +
	`spawnl|spawnle|spawnlp|spawnlpe|spawnv|spawnve|spawnvp|spawnvpe|posix_spawn|posix_spawnp|setsid|` +
	`create_subprocess_exec|create_subprocess_shell|ProcessPoolExecutor|` +
	`open_connection|open_unix_connection|start_server|create_connection|create_datagram_endpoint`

var pythonRisks = []riskRule{
	rule("$1", `(?:\bimport[ \t]+(?:[\w.]+(?:[ \t]+as[ \t]+\w+)?[ \t]*,[ \t]*)*|\bfrom[ \t]+|['"])(`+pythonModules+`)\b`,
		alternatives(pythonModules)...),
	rule("os.$1", `\.[ \t]*(`+pythonCalls+`)\b`, alternatives(pythonCalls)...),
	rule("os.$1", `['"](`+pythonCalls+`)['"]`, alternatives(pythonCalls)...),
	rule("os.$1", `\bimport\b[ \t]*(?:\([^)]*?|[^\n;]*?)\b(`+pythonCalls+`)\b`, "import"),
	rule("from $1 import *", `\bfrom[ \t]+(os|posix|subprocess|socket|ctypes|pty)[ \t]+import[ \t]*\*`, "*"),
	// Code built at run time: what it does cannot be read here.
	rule("$1", `(?:^|[^\w.])(`+pythonDynamic+`)[ \t]*\(`, alternatives(pythonDynamic)...),
	rule("$1", `['"](`+pythonDynamic+`)['"]`, alternatives(pythonDynamic)...),
	// The classic escapes from restricted namespaces.
	rule("$1", `\b(`+pythonEscapes+`)\b`, alternatives(pythonEscapes)...),
	rule("getattr on $1", `\bgetattr[ \t]*\([ \t]*(os|posix|sys|builtins|__builtins__|importlib|ctypes|socket|subprocess)\b`, "getattr"),
	{construct: "getattr with a computed name", re: regexp.MustCompile(`\bgetattr[ \t]*\([^,()]*,[ \t]*([^)\n]*)`),
		needles: []string{"getattr"}, keep: computedName},
	rule("$1", `\b((?:vars|globals|locals)[ \t]*\([^)]*\)[ \t]*\[)`, "vars", "globals", "locals"),
	rule("os.__dict__", `\b(?:os|posix|builtins)[ \t]*\.[ \t]*__dict__`, "__dict__"),
}

const (
	pythonDynamic = `exec|eval|compile|__import__|execfile`
	pythonEscapes = `__subclasses__|__globals__|__builtins__|__code__|__mro__|__bases__|__base__|__getattribute__|` +
		`__reduce__|__reduce_ex__|f_globals|f_builtins|f_back|gi_frame|tb_frame|_getframe|sys\.modules`
)

// computedName reports whether an argument is anything but one plain
// string literal: "sys" + "tem", 'metsys'[::-1], a variable.
func computedName(m []string) bool { return !plainLiteral.MatchString(m[1]) }

var plainLiteral = regexp.MustCompile(`^[ \t]*(?:'[\w.]*'|"[\w.]*")[ \t]*(?:,.*)?$`)

// Risks finds process starts, native code, sockets, forks, dynamic imports
// and dynamic code. See RiskScanner for what a scan is (and is not).
func (python) Risks(code string) []Risk {
	return scan(spliced(code), pythonRisks, kernelRisks)
}

var _ RiskScanner = python{}
