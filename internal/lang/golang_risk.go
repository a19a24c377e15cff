package lang

var goRisks = []riskRule{
	// Imports (any quoted import path, so an import alias changes
	// nothing): processes, raw system calls, pointers outside the type
	// system, sockets, native code.
	rule(`import "$1"`, `"(os/exec|syscall|unsafe|net|net/[\w/]+|plugin|C|runtime/cgo|golang\.org/x/sys/[\w/]+|golang\.org/x/net/[\w/]+)"`,
		`"os/exec"`, `"syscall"`, `"unsafe"`, `"net`, `"plugin"`, `"C"`, `"runtime/cgo"`, `"golang.org/x/`),
	rule("os.$1", `\b(StartProcess)\b`, "StartProcess"),
	// Compiler directives that reach the runtime's internals or C.
	rule("$1", `(//go:linkname|//go:cgo_\w+|#cgo\b)`, "//go:", "#cgo"),
}

// Risks finds imports of os/exec, syscall, unsafe, net, plugin and C,
// os.StartProcess and linkname directives. Go has no dynamic code or
// dynamic imports, so an import is the one way in. See RiskScanner.
func (golang) Risks(code string) []Risk {
	return scan(raw(code), goRisks, kernelRisks)
}

var _ RiskScanner = golang{}
