package lang

type golang struct{}

// goCachePath is the build cache in the sandbox: the warmed standard
// library below, the program's own packages in a private layer above.
const goCachePath = "/.corral/cache/go"

// goWarm imports what programs commonly use, so warming compiles those
// packages and their dependencies once instead of in every execution.
const goWarm = `package main

import (
	_ "bufio"
	_ "bytes"
	_ "container/heap"
	_ "context"
	_ "crypto/md5"
	_ "crypto/rand"
	_ "crypto/sha256"
	_ "encoding/base64"
	_ "encoding/csv"
	_ "encoding/hex"
	_ "encoding/json"
	_ "errors"
	_ "flag"
	_ "fmt"
	_ "io"
	_ "math"
	_ "math/big"
	_ "math/rand"
	_ "os"
	_ "path/filepath"
	_ "regexp"
	_ "slices"
	_ "sort"
	_ "strconv"
	_ "strings"
	_ "sync"
	_ "text/tabwriter"
	_ "time"
	_ "unicode"
)

func main() {}
`

func (golang) Cache() Cache {
	dir := CodeDir + "/warm"
	return Cache{
		Name: "go",
		Path: goCachePath,
		Warm: Plan{
			Files: []File{
				{Path: dir + "/main.go", Content: []byte(goWarm), Mode: 0o644},
				{Path: dir + "/go.mod", Content: []byte("module warm\n\ngo 1.21\n"), Mode: 0o644},
			},
			Compile: &Step{Argv: []string{"go", "build", "-o", "/dev/null", "."}, Env: goEnv, Dir: dir},
		},
	}
}

func (golang) Name() string { return "go" }

// goEnv keeps the toolchain offline and its caches on the sandbox's disk, so
// they count against disk_mb and vanish with the execution.
var goEnv = []string{
	"PATH=/usr/local/go/bin:/usr/lib/go/bin:/usr/local/bin:/usr/bin:/bin",
	"GOCACHE=" + goCachePath,
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
