package lang

import (
	_ "embed"
	"strings"
)

// Zygoter is a Runner whose Run step a pre-started interpreter (a zygote)
// can serve: the zygote imports modules once, then forks a child per
// execution that behaves as the Run step's own process would.
type Zygoter interface {
	// ZygoteStep starts a zygote that imports preload.
	ZygoteStep(preload []string) Step
	// Forkable reports whether the zygote started by ZygoteStep with
	// environment zygoteEnv can serve run with environment runEnv: the
	// same interpreter, and the same values of every variable the
	// interpreter reads when it starts.
	Forkable(run Step, zygoteEnv, runEnv []string) bool
}

//go:embed python_zygote.py
var pythonZygoteScript string

// pythonZygote is the zygote with the module it imports.
var pythonZygote = pythonProgram(pythonZygoteScript, corralProtoModule)

// ZygoteStep starts python3 with the zygote script; the child of each
// request runs `python3 -c CODE ARGS` (the Run step's argv) in-process. The
// zygote compiles the Run step's CODE (the wrapper) once, ahead.
func (p python) ZygoteStep(preload []string) Step {
	run := p.Plan("").Run
	return Step{
		Argv: append([]string{"python3", "-c", pythonZygote, run.Argv[2]}, preload...),
		Env:  run.Env,
	}
}

// Forkable: the Run step is `python3 -c ...`, and the variables the
// interpreter reads when it starts (PYTHON*, the locale) are the zygote's.
func (python) Forkable(run Step, zygoteEnv, runEnv []string) bool {
	if len(run.Argv) < 3 || run.Argv[0] != "python3" || run.Argv[1] != "-c" {
		return false
	}
	startup := func(env []string) string {
		var b strings.Builder
		for _, kv := range env {
			if strings.HasPrefix(kv, "PYTHON") || strings.HasPrefix(kv, "LANG=") || strings.HasPrefix(kv, "LC_") {
				b.WriteString(kv)
				b.WriteByte(0)
			}
		}
		return b.String()
	}
	return startup(zygoteEnv) == startup(runEnv)
}
