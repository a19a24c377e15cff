package lang

import _ "embed"

// Contexter is a Runner with code contexts (internal/kernel): a runner of
// its own, started in a sandbox as a root zygote that forks each new
// context; a context is itself a zygote that forks copies of itself.
type Contexter interface {
	// ContextStep starts the root zygote. Its environment is the
	// sandbox's base environment with Step.Env added.
	ContextStep() Step
	// ContextEnv is added to each context's environment, before the
	// caller's own variables.
	ContextEnv() []string
}

//go:embed python_context.py
var pythonContext string

// ContextStep runs the context runner as `python3 -c RUNNER root`.
func (python) ContextStep() Step {
	return Step{
		Argv: []string{"python3", "-c", pythonContext, "root"},
		Env:  []string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"},
	}
}

// ContextEnv makes matplotlib use the runner's inline backend, which sends
// figures as image/png results.
func (python) ContextEnv() []string {
	return []string{"MPLBACKEND=module://corral_inline"}
}
