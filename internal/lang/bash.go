package lang

type bash struct{}

func (bash) Name() string { return "bash" }

func (bash) Plan(code string) Plan {
	file := CodeDir + "/main.sh"
	return Plan{
		Files: []File{{Path: file, Content: []byte(code), Mode: 0o644}},
		// bash -n parses without running: a syntax error is a compile error.
		Compile: &Step{Argv: []string{"bash", "-n", file}},
		Run:     Step{Argv: []string{"bash", file}},
	}
}

func init() { Register(bash{}, "sh", "shell") }
