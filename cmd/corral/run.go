package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/sandbox"
)

// requestFlags are the execution options shared by run and exec.
type requestFlags struct {
	lang    string
	timeout time.Duration
	memory  int64
	cpus    float64
	disk    int64
	tier    string
	image   string
	session string
	jsonOut bool
}

func (f *requestFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.lang, "lang", "", "language (default: from the file extension)")
	fs.DurationVar(&f.timeout, "timeout", 0, "time limit, e.g. 5s (default: the server's, 30s)")
	fs.Int64Var(&f.memory, "memory", 0, "memory limit in MB (default 512)")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit in cores (default 1)")
	fs.Int64Var(&f.disk, "disk", 0, "disk limit for /workspace and /tmp in MB (default 1024)")
	fs.StringVar(&f.tier, "tier", "", "auto, container or gvisor")
	fs.StringVar(&f.tier, "isolation", "", "the old name of --tier, kept for one release")
	fs.StringVar(&f.image, "image", "", "image (default: the language's)")
	fs.StringVar(&f.session, "session", "", "session id: executions of one session share /workspace")
	fs.BoolVar(&f.jsonOut, "json", false, "print the execution record as JSON instead of the output")
}

var extLang = map[string]string{
	".py": "python", ".js": "javascript", ".cjs": "javascript", ".sh": "bash",
	".bash": "bash", ".go": "go", ".c": "c",
}

// request reads the code from the file argument ("-" is stdin) and builds
// the request.
func (f *requestFlags) request(args []string) (sandbox.ExecuteRequest, error) {
	if len(args) != 1 {
		return sandbox.ExecuteRequest{}, errors.New("give one file, or - for stdin")
	}
	var code []byte
	var err error
	if args[0] == "-" {
		code, err = io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
	} else {
		code, err = os.ReadFile(args[0])
	}
	if err != nil {
		return sandbox.ExecuteRequest{}, fmt.Errorf("read code: %w", err)
	}
	language := f.lang
	if language == "" {
		language = extLang[strings.ToLower(filepath.Ext(args[0]))]
		if language == "" {
			return sandbox.ExecuteRequest{}, errors.New("cannot tell the language; use --lang")
		}
	}
	return sandbox.ExecuteRequest{
		SessionID: f.session,
		Language:  language,
		Code:      string(code),
		Limits: sandbox.Limits{
			TimeoutMS: f.timeout.Milliseconds(),
			MemoryMB:  f.memory,
			CPUCores:  f.cpus,
			DiskMB:    f.disk,
		},
		Tier:  sandbox.Tier(f.tier),
		Image: f.image,
	}, nil
}

// streamSink prints a program's output as it runs.
type streamSink struct{}

func (streamSink) Stdout(p []byte) { os.Stdout.Write(p) }
func (streamSink) Stderr(p []byte) { os.Stderr.Write(p) }

// cmdRun runs one execution on this machine, without a server.
func cmdRun(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: corral run [flags] FILE|-\n\nRuns code in a sandbox on this machine and exits with a status that mirrors the verdict.")
		fs.PrintDefaults()
	}
	lc := config.DefaultLocal()
	var rf requestFlags
	config.RegisterFlags(fs, &lc)
	rf.register(fs)
	verbose := fs.Bool("v", false, "log what corral does")
	if _, err := parseFlags(fs, args); err != nil {
		return 4
	}
	if err := lc.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "corral run:", err)
		return 4
	}
	req, err := rf.request(fs.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral run:", err)
		return 4
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	loc, err := newLocal(context.Background(), lc, engine.DefaultConfig(), log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral run:", err)
		return 70
	}
	defer loc.Close()
	job, err := loc.engine.Prepare(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral run:", err)
		if errors.Is(err, engine.ErrTierPending) {
			return 70 // retryable, as internal_error
		}
		return 4
	}
	var sink engine.Sink = streamSink{}
	if rf.jsonOut {
		sink = nil
	}
	res := loc.engine.Run(ctx, job, sink)
	if rf.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "corral run:", err)
			return 70
		}
	} else {
		printVerdict(os.Stderr, &res)
	}
	return exitStatus(&res)
}
