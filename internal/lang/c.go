package lang

type c struct{}

func (c) Name() string { return "c" }

func (c) Plan(code string) Plan {
	src := CodeDir + "/main.c"
	bin := CodeDir + "/main"
	return Plan{
		Files:   []File{{Path: src, Content: []byte(code), Mode: 0o644}},
		Compile: &Step{Argv: []string{"gcc", "-O2", "-std=gnu17", "-o", bin, src, "-lm"}},
		Run:     Step{Argv: []string{bin}},
	}
}

func init() { Register(c{}) }
