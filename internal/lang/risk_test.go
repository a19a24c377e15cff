package lang

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type riskCase struct {
	name string
	code string
	// want lists "construct (line N)"; empty means no risk found.
	want []string
	// outOfScope, if set, says why a risky program is deliberately not
	// caught: the scan is a routing hint, and the sandbox policy holds
	// whatever it misses.
	outOfScope string
}

var riskCases = map[string][]riskCase{
	"python": {
		{name: "arithmetic", code: "print(sum(range(100)))"},
		{name: "data science", code: "import numpy as np\nimport pandas as pd\nimport re, os.path\nx = re.compile(r'\\d+')\nprint(np.arange(3), os.path.join('a', 'b'))"},
		{name: "subprocess", code: "import os\n\nimport subprocess\nsubprocess.run(['id'])", want: []string{"subprocess (line 3)"}},
		{name: "import list", code: "import sys, json as j, subprocess as sp", want: []string{"subprocess (line 1)"}},
		{name: "from import", code: "from subprocess import run", want: []string{"subprocess (line 1)"}},
		{name: "os.system", code: "import os\nos.system('id')", want: []string{"os.system (line 2)"}},
		{name: "os alias", code: "import os as o\no.popen('id')", want: []string{"os.popen (line 2)"}},
		{name: "from os import names", code: "from os import (\n    path,\n    execv,\n)", want: []string{"os.execv (line 3)"}},
		{name: "from os import star", code: "from os import *\nfork()", want: []string{"from os import * (line 1)"}},
		{name: "fork", code: "import os\nif os.fork() == 0:\n    pass", want: []string{"os.fork (line 2)"}},
		{name: "posix module", code: "import posix\nposix.system('id')", want: []string{"os.system (line 2)"}},
		{name: "ctypes", code: "import ctypes\nlibc = ctypes.CDLL(None)", want: []string{"ctypes (line 1)"}},
		{name: "socket", code: "import socket\nsocket.create_connection(('1.1.1.1', 53))", want: []string{"socket (line 1)", "os.create_connection (line 2)"}},
		{name: "pty", code: "import pty; pty.spawn('/bin/sh')", want: []string{"pty (line 1)"}},
		{name: "multiprocessing", code: "from multiprocessing import Pool", want: []string{"multiprocessing (line 1)"}},
		{name: "process pool", code: "from concurrent import futures\nfutures.ProcessPoolExecutor()", want: []string{"os.ProcessPoolExecutor (line 2)"}},
		{name: "asyncio subprocess", code: "import asyncio\nasyncio.create_subprocess_shell('id')", want: []string{"os.create_subprocess_shell (line 2)"}},
		{name: "urllib", code: "from urllib.request import urlopen", want: []string{"urllib (line 1)"}},
		{name: "line continuation", code: "import os\nos.sys\\\ntem('id')", want: []string{"os.system (line 2)"}},
		{name: "continued import", code: "import json, \\\n  subprocess", want: []string{"subprocess (line 2)"}},
		// Obfuscation that is caught: every road to a name built at run
		// time goes through one of a few doors.
		{name: "__import__ literal", code: "__import__('subprocess').run('id')", want: []string{"__import__ (line 1)", "subprocess (line 1)"}},
		{name: "__import__ concatenated", code: "__import__('o' + 's').system('id')", want: []string{"__import__ (line 1)", "os.system (line 1)"}},
		{name: "__import__ from bytes", code: "m = __import__(bytes([111, 115]).decode())\nm.getcwd()", want: []string{"__import__ (line 1)"}},
		{name: "importlib", code: "import importlib\nm = importlib.import_module('so' 'cket')", want: []string{"importlib (line 1)"}},
		{name: "exec of base64", code: "import base64\nexec(base64.b64decode('aW1wb3J0IG9z'))", want: []string{"exec (line 2)"}},
		{name: "eval of rot13", code: "import codecs\neval(codecs.decode('bf.flfgrz', 'rot13'))", want: []string{"eval (line 2)"}},
		{name: "compile builtin", code: "c = compile(src, 'x', 'exec')", want: []string{"compile (line 1)", "exec (line 1)"}},
		{name: "getattr computed", code: "import os\ngetattr(os, 'sys' + 'tem')('id')", want: []string{"getattr on os (line 2)", "getattr with a computed name (line 2)"}},
		{name: "getattr reversed", code: "import os as o\ngetattr(o, 'metsys'[::-1])('id')", want: []string{"getattr with a computed name (line 2)"}},
		{name: "getattr quoted", code: "getattr(m, 'system')('id')", want: []string{"os.system (line 1)"}},
		{name: "os dict", code: "import os\nos.__dict__['sys' + 'tem']('id')", want: []string{"os.__dict__ (line 2)"}},
		{name: "globals lookup", code: "from os import path\nglobals()['__buil' + 'tins__']", want: []string{"globals()[ (line 2)"}},
		{name: "subclasses walk", code: "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen']", want: []string{"__base__ (line 1)", "__subclasses__ (line 1)"}},
		{name: "builtins", code: "__builtins__.__dict__['ex' + 'ec']('1')", want: []string{"__builtins__ (line 1)"}},
		{name: "frame walk", code: "import sys\nf = sys._getframe(0).f_back.f_globals", want: []string{"_getframe (line 2)", "f_back (line 2)", "f_globals (line 2)"}},
		{name: "sys.modules", code: "import sys\nsys.modules['o' + 's']", want: []string{"sys.modules (line 2)"}},
		{name: "pickle payload", code: "import pickle\npickle.loads(blob)", want: []string{"pickle (line 1)"}},
		{name: "kernel path", code: "open('/proc/sysrq-trigger', 'w').write('b')", want: []string{"/proc/sysrq-trigger (line 1)"}},
		{name: "mmap exec", code: "import mmap\nm = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC)", want: []string{"PROT_EXEC (line 2)"}},
		// Comments are not stripped, so an import in a comment routes to
		// gVisor: a false positive costs a slower start, never safety.
		{name: "comment", code: "# import subprocess\nprint(1)", want: []string{"subprocess (line 1)"}},
		// Out of scope.
		{name: "module written then imported", code: "open('m.py', 'w').write(''.join(map(chr, [105, 109, 112])))\nimport m",
			outOfScope: "code written to a file and imported by a plain import is not read"},
		{name: "library starts processes", code: "import platform\nprint(platform.architecture())",
			outOfScope: "functions that start processes inside the standard library or third-party packages (platform.architecture runs file(1))"},
		{name: "alias of a builtin", code: "f = print.__self__\nf.open('/etc/hostname')",
			outOfScope: "reaching builtins through an object's attributes other than the listed dunders"},
	},
	"javascript": {
		{name: "arithmetic", code: "console.log([...Array(100).keys()].reduce((a, b) => a + b))"},
		{name: "fs and path", code: "const fs = require('fs'), path = require('node:path');\nfs.writeFileSync(path.join('/workspace', 'a'), 'x')"},
		{name: "child_process", code: "const fs = require('fs');\nconst { spawn } = require('child_process');", want: []string{"child_process (line 2)"}},
		{name: "node: prefix", code: "import { exec } from 'node:child_process';", want: []string{"child_process (line 1)"}},
		{name: "net", code: "const net = require(\"net\");\nnet.connect(80, '10.0.0.1')", want: []string{"net (line 1)"}},
		{name: "dgram", code: "require('dgram').createSocket('udp4')", want: []string{"dgram (line 1)"}},
		{name: "worker_threads", code: "const { Worker } = require('worker_threads')", want: []string{"worker_threads (line 1)"}},
		{name: "vm", code: "require('vm').runInNewContext('1+1')", want: []string{"vm (line 1)"}},
		{name: "process.binding", code: "process.binding('spawn_sync')", want: []string{"process.binding (line 1)"}},
		{name: "fetch", code: "await fetch('http://169.254.169.254/')", want: []string{"fetch (line 1)"}},
		{name: "template literal", code: "require(`child_process`)", want: []string{"child_process (line 1)"}},
		// Obfuscation that is caught.
		{name: "computed require", code: "const cp = require('child_' + 'process')", want: []string{"require of a computed name (line 1)"}},
		{name: "require from a variable", code: "const m = 'c' + 'hild_process'\nrequire(m)", want: []string{"require of a computed name (line 2)"}},
		{name: "require alias", code: "const r = require;\nr('ch' + 'ild_process')", want: []string{"require used as a value (line 1)"}},
		{name: "dynamic import", code: "const m = await import('chi' + 'ld_process')", want: []string{"dynamic import() (line 1)"}},
		{name: "eval", code: "eval(Buffer.from('cmVxdWlyZQ==', 'base64').toString())", want: []string{"eval (line 1)"}},
		{name: "new Function", code: "new Function('return process')()", want: []string{"Function (line 1)"}},
		{name: "constructor chain", code: "this.constructor.constructor('return process')()", want: []string{"Function constructor (line 1)", "constructor.constructor (line 1)"}},
		{name: "process index", code: "process['bin' + 'ding']('fs')", want: []string{"process[…] (line 1)"}},
		{name: "module loader", code: "module.constructor._load('child_process')", want: []string{"_load (line 1)", "child_process (line 1)"}},
		{name: "string timer", code: "setTimeout('f()', 0)", want: []string{"setTimeout with a string (line 1)"}},
		// Out of scope.
		{name: "aliased process", code: "const p = process;\nconst k = ['bin', 'ding'].join('');\np[k]('fs')",
			outOfScope: "a computed property of an alias of process"},
	},
	"bash": {
		{name: "arithmetic", code: "echo $(( 99 * 100 / 2 ))"},
		{name: "pipes and redirects", code: "ls -l /workspace 2>&1 | sort >&2 && echo ok &>/dev/null\n[[ -n x && -z '' ]] && cat <<EOF\nhi\nEOF"},
		{name: "background", code: "echo start\nsleep 100 &\nwait", want: []string{"background job (&) (line 2)"}},
		{name: "fork bomb", code: ":(){ :|:& };:", want: []string{"background job (&) (line 1)"}},
		{name: "nohup", code: "nohup sleep 100", want: []string{"nohup (line 1)"}},
		{name: "setsid", code: "setsid -f sleep 100", want: []string{"setsid (line 1)"}},
		{name: "curl", code: "curl -s http://169.254.169.254/", want: []string{"curl (line 1)"}},
		{name: "wget", code: "wget -qO- example.com", want: []string{"wget (line 1)"}},
		{name: "nc", code: "nc 10.0.0.1 22 </dev/null", want: []string{"nc (line 1)"}},
		{name: "dev tcp", code: "exec 3<>/dev/tcp/10.0.0.1/80", want: []string{"/dev/tcp (line 1)"}},
		{name: "other interpreter", code: "python3 - <<'EOF'\nprint(1)\nEOF", want: []string{"python3 (line 1)"}},
		{name: "sh -c", code: "bash -c 'id'", want: []string{"bash -c (line 1)"}},
		{name: "awk system", code: "awk 'BEGIN { system(\"id\") }'", want: []string{"system() (line 1)"}},
		{name: "ip route", code: "ip route add 10.0.0.0/8 dev lo", want: []string{"ip route add (line 1)"}},
		// Obfuscation that is caught.
		{name: "split quotes", code: "c'u'r\"l\" http://x", want: []string{"curl (line 1)"}},
		{name: "backslashes", code: "c\\u\\r\\l http://x", want: []string{"curl (line 1)"}},
		{name: "line continuation", code: "cu\\\nrl http://x", want: []string{"curl (line 1)"}},
		{name: "variable command", code: "x=cu\n${x}rl http://x", want: []string{"command name from a variable (line 2)"}},
		{name: "substitution command", code: "$(echo Y3VybA== | base64 -d) http://x", want: []string{"base64 --decode (line 1)", "command name from a variable (line 1)"}},
		{name: "ansi-c escapes", code: "$'\\x63\\x75\\x72\\x6c' http://x", want: []string{"$'…' escapes (line 1)", "command name from a variable (line 1)"}},
		{name: "pipe into a shell", code: "printf 'id' | sh", want: []string{"pipe into a shell (line 1)"}},
		{name: "eval", code: "cmd='id'\neval \"$cmd\"", want: []string{"eval (line 2)"}},
		// Out of scope.
		{name: "partial variable", code: "X=url\nc$X http://x",
			outOfScope: "a command name only partly built from a variable"},
		{name: "find -exec", code: "find /workspace -maxdepth 0 -exec id \\;",
			outOfScope: "programs that run other commands themselves in the foreground (find -exec, sed's e flag)"},
	},
	"go": {
		{name: "hello", code: "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(4950) }\n"},
		{name: "os is fine", code: "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() { fmt.Fprintln(os.Stderr, 1) }\n"},
		{name: "os/exec", code: "package main\n\nimport (\n\t\"fmt\"\n\t\"os/exec\"\n)\n", want: []string{`import "os/exec" (line 5)`}},
		{name: "alias", code: "package main\n\nimport sc \"syscall\"\n", want: []string{`import "syscall" (line 3)`}},
		{name: "unsafe", code: "package main\n\nimport _ \"unsafe\"\n\n//go:linkname f runtime.f\nfunc f()\n", want: []string{`import "unsafe" (line 3)`, "//go:linkname (line 5)"}},
		{name: "net/http", code: "package main\n\nimport \"net/http\"\n", want: []string{`import "net/http" (line 3)`}},
		{name: "StartProcess", code: "package main\n\nimport \"os\"\n\nfunc main() { os.StartProcess(\"/bin/sh\", nil, &os.ProcAttr{}) }\n", want: []string{"os.StartProcess (line 5)"}},
		{name: "cgo", code: "package main\n\n// #include <stdlib.h>\nimport \"C\"\n", want: []string{`import "C" (line 4)`}},
		{name: "plugin", code: "package main\n\nimport \"plugin\"\n", want: []string{`import "plugin" (line 3)`}},
		// Out of scope.
		{name: "computed path", code: "package main\n\nimport \"os\"\n\nfunc main() { os.WriteFile(\"/pro\"+\"c/self/mem\", nil, 0) }\n",
			outOfScope: "kernel paths built at run time (the policy masks or refuses them)"},
	},
	"c": {
		{name: "hello", code: "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 4950); return 0; }\n"},
		{name: "words in strings", code: "#include <stdio.h>\nint main(void) { puts(\"the system is ready; fork me\"); }\n"},
		{name: "fork", code: "#include <unistd.h>\nint main(void) { for (;;) fork(); }\n", want: []string{"fork() (line 2)"}},
		{name: "system", code: "#include <stdlib.h>\nint main(void) { return system(\"id\"); }\n", want: []string{"system() (line 2)"}},
		{name: "exec", code: "#include <unistd.h>\nint main(void) { execl(\"/bin/sh\", \"sh\", 0); }\n", want: []string{"execl() (line 2)"}},
		{name: "popen", code: "#include <stdio.h>\nint main(void) { popen(\"id\", \"r\"); }\n", want: []string{"popen() (line 2)"}},
		{name: "syscall", code: "#include <sys/syscall.h>\n#include <unistd.h>\nint main(void) { return syscall(SYS_getpid) < 0; }\n", want: []string{"#include <sys/syscall.h> (line 1)", "syscall() (line 3)"}},
		{name: "asm", code: "int main(void) { __asm__ volatile (\"syscall\"); }\n", want: []string{"inline assembly (line 1)"}},
		{name: "socket", code: "#include <sys/socket.h>\nint main(void) { return socket(2, 1, 0); }\n", want: []string{"#include <sys/socket.h> (line 1)", "socket() (line 2)"}},
		{name: "ptrace", code: "long ptrace(int, int, void*, void*);\nint main(void) { return ptrace(0, 0, 0, 0); }\n", want: []string{"ptrace() (line 1)"}},
		// Obfuscation that is caught.
		{name: "function pointer", code: "#include <unistd.h>\nint main(void) { int (*f)(void) = fork; return f(); }\n", want: []string{"fork() (line 2)"}},
		{name: "token pasting", code: "#define J(a, b) a##b\nint main(void) { return J(sys, tem)(\"id\"); }\n", want: []string{"token pasting (##) (line 1)"}},
		{name: "line splice", code: "#include <stdlib.h>\nint main(void) { return sys\\\ntem(\"id\"); }\n", want: []string{"system() (line 2)"}},
		{name: "dlsym", code: "#include <dlfcn.h>\nint main(void) { void *f = dlsym(RTLD_DEFAULT, \"sys\" \"tem\"); }\n", want: []string{"#include <dlfcn.h> (line 1)", "dlsym() (line 2)"}},
		{name: "shellcode", code: "#include <sys/mman.h>\nint main(void) { void *p = mmap(0, 4096, PROT_READ|PROT_WRITE|PROT_EXEC, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0); }\n", want: []string{"PROT_EXEC (line 2)"}},
		// Out of scope.
		{name: "address arithmetic", code: "#include <stdio.h>\nint main(void) { int (*f)(const char *) = (void *)((char *)puts + 0x1234); return f(\"id\"); }\n",
			outOfScope: "a libc function reached through address arithmetic from another"},
	},
}

func TestRisks(t *testing.T) {
	for language, cases := range riskCases {
		r, ok := Get(language)
		if !ok {
			t.Fatalf("no runner %s", language)
		}
		sc, ok := r.(RiskScanner)
		if !ok {
			t.Fatalf("%s has no RiskScanner", language)
		}
		for _, c := range cases {
			t.Run(language+"/"+c.name, func(t *testing.T) {
				var got []string
				for _, r := range sc.Risks(c.code) {
					got = append(got, r.String())
				}
				if c.outOfScope != "" && len(c.want) > 0 {
					t.Fatal("an out-of-scope case expects no risk")
				}
				if diff := cmp.Diff(c.want, got); diff != "" {
					t.Errorf("risks (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestEveryRunnerScans keeps routing honest as languages are added: a
// runner without a scanner is routed to gVisor whatever its code does.
func TestEveryRunnerScans(t *testing.T) {
	for _, name := range Names() {
		r, _ := Get(name)
		if _, ok := r.(RiskScanner); !ok {
			t.Errorf("%s has no RiskScanner", name)
		}
		if len(riskCases[name]) == 0 {
			t.Errorf("%s has no risk cases", name)
		}
	}
}

// TestRisksLargeInput scans a megabyte (the default code limit) of
// pathological input in every language, which must stay fast: Prepare
// runs the scan on the request path.
func TestRisksLargeInput(t *testing.T) {
	inputs := []string{
		strings.Repeat("a", 1<<20),
		strings.Repeat("&", 1<<20),
		strings.Repeat("import os, ", 1<<16),
		strings.Repeat("require(", 1<<17),
		strings.Repeat("getattr(x, ", 1<<16),
		strings.Repeat("\\\n", 1<<19),
		strings.Repeat("'\"", 1<<19),
	}
	for _, name := range Names() {
		r, _ := Get(name)
		for _, in := range inputs {
			for _, risk := range r.(RiskScanner).Risks(in) {
				if risk.Line < 1 || risk.Line > strings.Count(in, "\n")+1 {
					t.Errorf("%s: %v out of range", name, risk)
				}
			}
		}
	}
}

func FuzzRisks(f *testing.F) {
	for _, cases := range riskCases {
		for _, c := range cases {
			f.Add(c.code)
		}
	}
	f.Fuzz(func(t *testing.T, code string) {
		lines := strings.Count(code, "\n") + 1
		for _, name := range Names() {
			r, _ := Get(name)
			seen := map[string]bool{}
			for _, risk := range r.(RiskScanner).Risks(code) {
				if risk.Line < 1 || risk.Line > lines {
					t.Errorf("%s: %v outside 1..%d", name, risk, lines)
				}
				if seen[risk.Construct] {
					t.Errorf("%s: %s twice", name, risk.Construct)
				}
				seen[risk.Construct] = true
			}
		}
	})
}
