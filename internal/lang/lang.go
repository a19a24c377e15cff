// Package lang turns source code in a language into the files and commands
// that run it in a sandbox. Each language is one Runner registered here;
// adding a language touches nothing else.
package lang

import (
	"sort"
	"sync"
)

// CodeDir is where runners place code inside the sandbox. /tmp is emptied
// before every execution, so nothing a runner writes outlives it.
const CodeDir = "/tmp/.corral"

// File is a file a runner needs in the sandbox.
type File struct {
	Path    string // absolute, inside the sandbox
	Content []byte
	Mode    uint32
}

// Step is one process of a plan.
type Step struct {
	Argv []string
	// Env adds to or overrides the sandbox's base environment.
	Env []string
	// Dir is the working directory; empty means /workspace.
	Dir string
	// StatusFD gives the process fd 3 for reporting facts; a runner's
	// wrapper writes "compile_error" there when the code does not parse,
	// and closes it before running the code.
	StatusFD bool
}

// Plan is how to run some code.
type Plan struct {
	Files []File
	// Compile, if set, runs first with its own time limit; a non-zero exit
	// is a compile error and Run does not happen.
	Compile *Step
	Run     Step
}

// StatusCompileError is what a wrapper writes to its status fd when the code
// does not compile.
const StatusCompileError = "compile_error"

// Runner knows one language.
type Runner interface {
	// Name is the language's name in requests.
	Name() string
	// Plan returns how to run code.
	Plan(code string) Plan
}

// Explainer is a Runner that knows where its language's runtime puts the
// error in stderr. Runners without it get the last non-blank line.
type Explainer interface {
	Explain(stderr string) string
}

// Cache is a language's shared build cache (Go's compiled standard
// library): warmed once per image by Corral's own trusted plan, then given
// to every sandbox read-only with a private writable layer on top, so no
// program can poison it for another and a program's own additions count
// against its disk.
type Cache struct {
	// Name names the cache on the host.
	Name string
	// Path is where it appears in the sandbox.
	Path string
	// Warm fills it; its compile step runs with Path writable.
	Warm Plan
}

// Cacher is a Runner with a Cache.
type Cacher interface {
	Cache() Cache
}

var (
	mu       sync.RWMutex
	registry = map[string]Runner{}
	aliases  = map[string]string{}
)

// Register adds a runner under its name and any aliases. It panics on a
// duplicate, which is a programming error.
func Register(r Runner, alias ...string) {
	mu.Lock()
	defer mu.Unlock()
	for _, n := range append([]string{r.Name()}, alias...) {
		if _, dup := registry[n]; dup {
			panic("lang: duplicate language " + n)
		}
		registry[n] = r
		if n != r.Name() {
			aliases[n] = r.Name()
		}
	}
}

// Get returns the runner for a language name or alias.
func Get(name string) (Runner, bool) {
	mu.RLock()
	defer mu.RUnlock()
	r, ok := registry[name]
	return r, ok
}

// Names lists the canonical language names, sorted.
func Names() []string {
	mu.RLock()
	defer mu.RUnlock()
	var out []string
	for n := range registry {
		if _, alias := aliases[n]; !alias {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
