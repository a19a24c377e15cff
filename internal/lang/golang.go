package lang

type golang struct{}

func (golang) Name() string { return "go" }

// goEnv keeps the toolchain offline and its caches on the sandbox's disk, so
// they count against disk_mb and vanish with the execution.
var goEnv = []string{
	"PATH=/usr/local/go/bin:/usr/lib/go/bin:/usr/local/bin:/usr/bin:/bin",
	"GOCACHE=" + CodeDir + "/gocache",
	"GOPATH=" + CodeDir + "/gopath",
	"GOTOOLCHAIN=local",
	"GOPROXY=off",
	"GOFLAGS=-mod=mod",
	"GOTELEMETRY=off",
	"CGO_ENABLED=0",
}

func (golang) Plan(code string) Plan {
	dir := CodeDir + "/go"
	bin := CodeDir + "/main"
	return Plan{
		Files: []File{
			{Path: dir + "/main.go", Content: []byte(code), Mode: 0o644},
			{Path: dir + "/go.mod", Content: []byte("module main\n\ngo 1.21\n"), Mode: 0o644},
		},
		Compile: &Step{Argv: []string{"go", "build", "-o", bin, "."}, Env: goEnv, Dir: dir},
		Run:     Step{Argv: []string{bin}},
	}
}

func init() { Register(golang{}, "golang") }
