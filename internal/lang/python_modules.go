package lang

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// Corral's python scripts (the zygote, the context runner) import helper
// modules that sit beside them here, as any python program does, so that
// each file runs and is tested alone on the host. In a sandbox they run as
// `python3 -c SCRIPT`, with no file to import from: pythonProgram puts
// before SCRIPT a prologue that holds the modules' sources, and a finder
// first on sys.meta_path that makes each module from its source when the
// script imports it. The finder leaves sys.meta_path once it has made them
// all, so what the script imports is loaded at its import, as from a file
// (the zygote's list of its own modules, which its children unload, holds
// them), and nothing of the prologue stays on an execution's path. It adds
// no process, no file and no import of its own: type(sys.__spec__) is the
// import system's ModuleSpec, which a fresh interpreter has loaded.

// pythonModule is a module a script imports: its name and source.
type pythonModule struct{ name, source string }

//go:embed corral_proto.py
var corralProto string

// corralProtoModule is the zygote protocol as the python zygotes speak it.
var corralProtoModule = pythonModule{"corral_proto", corralProto}

// pythonModulesPrologue is the prologue, its sources dict left to fill.
const pythonModulesPrologue = `import sys
class _CorralModules:
    sources = {%s}
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in cls.sources:
            return None
        return type(sys.__spec__)(name, cls, origin=name + '.py')
    @staticmethod
    def create_module(spec):
        return None
    @classmethod
    def exec_module(cls, module):
        source = cls.sources.pop(module.__name__)
        if not cls.sources:
            sys.meta_path.remove(cls)
        exec(compile(source, module.__spec__.origin, 'exec'), module.__dict__)
sys.meta_path.insert(0, _CorralModules)
`

// pythonProgram returns script with the prologue that makes modules, each
// of which script imports, importable.
func pythonProgram(script string, modules ...pythonModule) string {
	entries := make([]string, len(modules))
	for i, m := range modules {
		// A Go quoted string is a python one: the same escapes, and the
		// sources are UTF-8.
		entries[i] = strconv.Quote(m.name) + ": " + strconv.Quote(m.source)
	}
	return fmt.Sprintf(pythonModulesPrologue, strings.Join(entries, ", ")) + script
}
