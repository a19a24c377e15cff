package lang

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"strconv"
)

// Contexter is a Runner with code contexts (internal/kernel): stateful
// interpreters that run cells one after another. A context reads cells from
// its stdin and writes events to its status fd, one JSON object per line
// (the events are listed in python_context.py).
type Contexter interface {
	// ContextStep starts the language's runner: a root zygote that forks
	// each context (ContextZygote), or one context. Its environment is the
	// sandbox's base environment with Step.Env added.
	ContextStep() Step
	// ContextZygote: contexts are forked from a root zygote and are
	// zygotes themselves, so they fork (internal/agent/zygote_via.go).
	ContextZygote() bool
	// ContextEnv is added to each context's environment, before the
	// caller's own variables.
	ContextEnv() []string
	// ContextSetup is written to a new context's stdin before its first
	// cell; nil for none.
	ContextSetup() []byte
	// ContextRequest is cell number cell with code, as the context reads
	// it from its stdin.
	ContextRequest(cell uint64, code string) []byte
}

//go:embed python_context.py
var pythonContextScript string

// pythonContext is the context runner with the module it imports.
var pythonContext = pythonProgram(pythonContextScript, corralProtoModule)

// ContextStep runs the context runner as `python3 -c RUNNER root`.
func (python) ContextStep() Step {
	return Step{
		Argv: []string{"python3", "-c", pythonContext, "root"},
		Env:  []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"},
	}
}

func (python) ContextZygote() bool { return true }

// ContextEnv makes matplotlib use the runner's inline backend, which sends
// figures as image/png results.
func (python) ContextEnv() []string {
	return []string{"MPLBACKEND=module://corral_inline"}
}

func (python) ContextSetup() []byte { return nil }

// ContextRequest is one JSON line: {"cell": CELL, "code": CODE}; the
// cell's events name it by the same field.
func (python) ContextRequest(cell uint64, code string) []byte {
	b, _ := json.Marshal(struct {
		Cell uint64 `json:"cell"`
		Code string `json:"code"`
	}{cell, code})
	return append(b, '\n')
}

//go:embed bash_context.sh
var bashContext []byte

// ContextStep runs an interactive bash that reads its cells from stdin
// (bash_context.sh says why interactive).
func (bash) ContextStep() Step {
	return Step{Argv: []string{"bash", "--noprofile", "--norc", "--noediting", "-i", "-s"}}
}

func (bash) ContextZygote() bool  { return false }
func (bash) ContextEnv() []string { return nil }
func (bash) ContextSetup() []byte { return bashContext }

// ContextRequest is the cell's two lines (bash_context.sh), the code in
// base64 so that it is one word of one line.
func (bash) ContextRequest(cell uint64, code string) []byte {
	n := strconv.FormatUint(cell, 10)
	return []byte("__corral_run " + n + " " + base64.StdEncoding.EncodeToString([]byte(code)) +
		"\ntrap '' INT; __corral_end " + n + "; trap - INT\n")
}

//go:embed javascript_context.js
var javascriptContext string

// ContextStep runs node with the context runner.
func (javascript) ContextStep() Step {
	return Step{Argv: []string{"node", "-e", javascriptContext}}
}

func (javascript) ContextZygote() bool  { return false }
func (javascript) ContextEnv() []string { return nil }
func (javascript) ContextSetup() []byte { return nil }

// ContextRequest is one JSON line, as python's.
func (javascript) ContextRequest(cell uint64, code string) []byte {
	return python{}.ContextRequest(cell, code)
}
