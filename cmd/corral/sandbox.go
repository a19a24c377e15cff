package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/corralhq/corral/internal/config"
	"github.com/corralhq/corral/sandbox"
)

// sandboxCommands are the subcommands of corral sandbox: live sandboxes
// over /v1/sandboxes.
var sandboxCommands []command

func init() {
	sandboxCommands = []command{
		{"create", "make a live sandbox; print its id", cmdSandboxCreate},
		{"list", "list live sandboxes (--metadata k=v to filter)", cmdSandboxList},
		{"kill", "end sandboxes, their processes and files", cmdSandboxKill},
		{"timeout", "make a sandbox end a duration from now", cmdSandboxTimeout},
		{"pause", "pause sandboxes (gVisor: with their memory)", cmdSandboxPause},
		{"resume", "resume paused sandboxes", cmdSandboxResume},
		{"snapshot", "take a snapshot of a sandbox (gVisor: with its memory); print its id", cmdSandboxSnapshot},
		{"snapshots", "list snapshots; rm deletes them", cmdSandboxSnapshots},
		{"fork", "make N sandboxes from one snapshot of a sandbox", cmdSandboxFork},
		{"exec", "run a command in a sandbox, streaming its output", cmdSandboxExec},
		{"run", "run code in a sandbox's code context; variables persist", cmdSandboxRun},
		{"ps", "list a sandbox's processes", cmdSandboxPs},
		{"files", "ls, cat, put or rm a sandbox's files", cmdSandboxFiles},
		{"url", "print the URL of a port of a sandbox", cmdSandboxURL},
	}
}

func sandboxUsage() {
	fmt.Fprintf(os.Stderr, "usage: corral sandbox <command> [flags]\n\n"+
		"Live sandboxes: held for their whole life, processes run on between calls, files stay.\n\ncommands:\n")
	for _, c := range sandboxCommands {
		fmt.Fprintf(os.Stderr, "  %-9s %s\n", c.name, c.summary)
	}
}

// cmdSandbox dispatches corral sandbox <command>.
func cmdSandbox(args []string) int {
	if len(args) == 0 {
		sandboxUsage()
		return 4
	}
	for _, c := range sandboxCommands {
		if c.name == args[0] {
			return c.run(args[1:])
		}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		sandboxUsage()
		return 0
	}
	fmt.Fprintf(os.Stderr, "corral sandbox: unknown command %q\n", args[0])
	sandboxUsage()
	return 4
}

// pairsFlag is a repeatable k=v flag.
type pairsFlag map[string]string

func (p *pairsFlag) String() string {
	if p == nil || *p == nil {
		return ""
	}
	keys := make([]string, 0, len(*p))
	for k := range *p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + (*p)[k]
	}
	return strings.Join(keys, ",")
}

func (p *pairsFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	if *p == nil {
		*p = map[string]string{}
	}
	(*p)[k] = v
	return nil
}

// sandboxFlags makes a flag set for corral sandbox NAME with the client
// flags.
func sandboxFlags(name, synopsis, about string) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet("sandbox "+name, flag.ContinueOnError)
	remoteUsage(fs, synopsis, about)
	cf := &clientFlags{}
	cf.register(fs)
	return fs, cf
}

// parseSandbox parses a sandbox command's flags; ok is false (with the exit
// status in code) when the command should stop. Of the environment it
// reads only CORRAL_ENDPOINT and CORRAL_API_KEY: per-call flags such as
// --timeout, --shell or --env take nothing from CORRAL_<NAME>, which the
// other commands' flags of the same names read.
func parseSandbox(fs *flag.FlagSet, args []string) (code int, ok bool) {
	lookup := func(name string) (string, bool) {
		if name != config.EnvName("endpoint") && name != config.EnvName("api-key") {
			return "", false
		}
		return os.LookupEnv(name)
	}
	_, err := config.ParseFlags(fs, args, lookup)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	case err != nil: // ParseFlags has said why
		return 4, false
	}
	return 0, true
}

// parseInterspersed parses flags given before and after the leading id
// argument ("exec ID --shell 'x'"); what follows "--" or the first other
// argument is left in rest.
func parseInterspersed(fs *flag.FlagSet, args []string) (id string, rest []string, code int, ok bool) {
	if code, ok := parseSandbox(fs, args); !ok {
		return "", nil, code, false
	}
	if fs.NArg() == 0 || fs.Arg(0) == "" {
		fs.Usage()
		return "", nil, 4, false
	}
	id = fs.Arg(0)
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", nil, 0, false
		}
		return "", nil, 4, false
	}
	return id, fs.Args(), 0, true
}

func cmdSandboxCreate(args []string) int {
	fs, cf := sandboxFlags("create", "[flags]",
		"Makes a live sandbox and prints its id (--json: its description). It lives until\n"+
			"--timeout from now, `corral sandbox timeout` or `corral sandbox kill`.")
	var (
		req          sandbox.CreateSandboxRequest
		timeout      time.Duration
		tier         string
		meta, env    pairsFlag
		jsonOut      bool
		memory, disk int64
		cpus         float64
		pids         int64
		allow        string
		onTimeout    string
		autoResume   bool
	)
	fs.StringVar(&req.Language, "lang", "", "language: picks the image and caches (default bash)")
	fs.StringVar(&req.Image, "image", "", "image (default: the language's)")
	fs.StringVar(&tier, "tier", "", "auto, container or gvisor")
	fs.StringVar(&tier, "isolation", "", "the old name of --tier, kept for one release")
	fs.DurationVar(&timeout, "timeout", 0, "lifetime from now, e.g. 10m (default: the server's, 5m)")
	fs.Int64Var(&memory, "memory", 0, "memory limit of the whole sandbox in MB")
	fs.Float64Var(&cpus, "cpus", 0, "CPU limit in cores")
	fs.Int64Var(&pids, "pids", 0, "process and thread limit")
	fs.Int64Var(&disk, "disk", 0, "disk limit for /workspace and /tmp in MB")
	fs.Var(&meta, "metadata", "a key=value label (repeatable)")
	fs.Var(&env, "env", "a NAME=value environment variable of every process (repeatable)")
	fs.StringVar(&allow, "network-allow", "", "comma-separated domains the sandbox may reach (default: no network)")
	fs.StringVar(&req.SandboxID, "id", "", "sandbox id (default: the server makes one)")
	fs.StringVar(&onTimeout, "on-timeout", "", "kill (default) or pause: at its timeout the sandbox is paused (kept, resumed by its next call) instead of removed")
	fs.BoolVar(&autoResume, "auto-resume", false, "a pause by a client is undone by the next call too, as the server's own pauses are")
	fs.StringVar(&req.SnapshotID, "snapshot", "", "make it from this snapshot (id or name): its files and, on gVisor, its memory")
	fs.BoolVar(&jsonOut, "json", false, "print the sandbox's description as JSON")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 4
	}
	if timeout < 0 || timeout%time.Second != 0 {
		fmt.Fprintf(os.Stderr, "corral sandbox create: --timeout %s: not a positive number of seconds\n", timeout)
		return 4
	}
	req.Tier = sandbox.Tier(tier)
	req.TimeoutSeconds = int64(timeout / time.Second)
	req.Limits = sandbox.SandboxLimits{MemoryMB: memory, CPUCores: cpus, Pids: pids, DiskMB: disk}
	req.Metadata, req.Env = meta, env
	if allow != "" {
		req.Network = &sandbox.Network{Allow: strings.Split(allow, ",")}
	}
	if onTimeout != "" || autoResume {
		req.Lifecycle = &sandbox.SandboxLifecycle{OnTimeout: onTimeout, AutoResume: autoResume}
	}
	ctx, stop := interruptible()
	defer stop()
	_, info, err := cf.client().CreateSandbox(ctx, req)
	if err != nil {
		return callFailed("sandbox create", err)
	}
	if jsonOut {
		return printJSON(os.Stdout, info)
	}
	fmt.Println(info.SandboxID)
	return 0
}

func cmdSandboxList(args []string) int {
	fs, cf := sandboxFlags("list", "[flags]",
		"Lists the key's live sandboxes on every node, those whose metadata hold every\n"+
			"--metadata pair.")
	var meta pairsFlag
	fs.Var(&meta, "metadata", "only sandboxes with this key=value label (repeatable)")
	jsonOut := fs.Bool("json", false, "print the list as JSON ({\"sandboxes\": [...]})")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	list, err := cf.client().ListSandboxes(ctx, meta)
	if err != nil {
		return callFailed("sandbox list", err)
	}
	if *jsonOut {
		return printJSON(os.Stdout, sandbox.SandboxList{Sandboxes: append([]sandbox.Info{}, list...)})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SANDBOX\tLANGUAGE\tTIER\tSTATE\tEXPIRES\tMETADATA")
	for _, s := range list {
		m := pairsFlag(s.Metadata)
		labels := m.String()
		if labels == "" {
			labels = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.SandboxID, s.Language, s.Tier, s.State,
			s.ExpiresAt.Local().Format("2006-01-02 15:04:05"), labels)
	}
	tw.Flush()
	return 0
}

func cmdSandboxKill(args []string) int {
	return forEachSandbox(args, "kill", "Ends live sandboxes: their processes and files go.", false,
		func(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Info, string, error) {
			return nil, "killed", sb.Kill(ctx)
		})
}

// forEachSandbox runs a command that acts on each sandbox id it is given,
// one after another; act says what it did (and, with --json where
// withJSON, the sandbox's description is printed instead). The exit status
// is the worst of the calls'.
func forEachSandbox(args []string, name, about string, withJSON bool,
	act func(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Info, string, error)) int {
	fs, cf := sandboxFlags(name, "[flags] ID...", about)
	jsonOut := new(bool)
	if withJSON {
		fs.BoolVar(jsonOut, "json", false, "print each sandbox's description as JSON")
	}
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	client := cf.client()
	status := 0
	for _, id := range fs.Args() {
		info, said, err := act(ctx, client.Sandbox(id))
		switch {
		case err != nil:
			status = max(status, callFailed("sandbox "+name, err))
		case *jsonOut:
			status = max(status, printJSON(os.Stdout, info))
		default:
			fmt.Printf("%s: %s\n", id, said)
		}
	}
	return status
}

func cmdSandboxTimeout(args []string) int {
	fs, cf := sandboxFlags("timeout", "[flags] ID DURATION",
		"Makes the sandbox end DURATION (e.g. 10m) from now, sooner or later than it would.")
	jsonOut := fs.Bool("json", false, "print the sandbox's description as JSON")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	if fs.NArg() != 2 {
		fs.Usage()
		return 4
	}
	d, err := time.ParseDuration(fs.Arg(1))
	if err != nil || d < time.Second {
		fmt.Fprintf(os.Stderr, "corral sandbox timeout: %q: not a duration of a second or more\n", fs.Arg(1))
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	info, err := cf.client().Sandbox(fs.Arg(0)).SetTimeout(ctx, d)
	if err != nil {
		return callFailed("sandbox timeout", err)
	}
	if *jsonOut {
		return printJSON(os.Stdout, info)
	}
	fmt.Printf("%s: expires %s\n", info.SandboxID, info.ExpiresAt.Local().Format("2006-01-02 15:04:05"))
	return 0
}

func cmdSandboxPause(args []string) int {
	return forEachSandbox(args, "pause",
		"Pauses live sandboxes: their files are kept, and on gVisor their memory too (their\n"+
			"processes and code contexts go on after resume); on runc their processes end. A\n"+
			"paused sandbox's timeout stops until `corral sandbox resume`.", true,
		func(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Info, string, error) {
			info, err := sb.Pause(ctx)
			switch {
			case err != nil:
				return nil, "", err
			case info.Pause != nil && info.Pause.Memory:
				return info, fmt.Sprintf("paused with its memory (%.1f MiB) in %d ms", float64(info.Pause.ImageBytes)/(1<<20), info.Pause.DurationMS), nil
			}
			return info, "paused with its files only; its processes ended", nil
		})
}

func cmdSandboxResume(args []string) int {
	return forEachSandbox(args, "resume",
		"Resumes paused sandboxes, each with its whole timeout again, and says what was kept.", true,
		func(ctx context.Context, sb *sandbox.Sandbox) (*sandbox.Info, string, error) {
			info, err := sb.Resume(ctx)
			switch {
			case err != nil:
				return nil, "", err
			case info.Resume != nil && info.Resume.Memory:
				return info, fmt.Sprintf("resumed with its memory in %d ms: %d processes and %d contexts go on",
					info.Resume.DurationMS, info.Resume.Processes, info.Resume.Contexts), nil
			}
			lost := 0
			if info.Resume != nil {
				lost = info.Resume.ProcessesLost
			}
			return info, fmt.Sprintf("resumed with its files only; lost %d process(es) and its code contexts", lost), nil
		})
}

func cmdSandboxExec(args []string) int {
	fs, cf := sandboxFlags("exec", "[flags] ID [flags] (-- CMD [ARG...] | --shell LINE)",
		"Runs a command in a live sandbox: stdout and stderr are streamed as they come and\n"+
			"the exit status is the process's (128+n when signal n killed it; 70 when the sandbox\n"+
			"ended under it). Ctrl-C sends SIGTERM to the process. --background prints the\n"+
			"pid and returns while the process runs on.")
	var (
		req                 sandbox.StartProcessRequest
		env                 pairsFlag
		background, stdinOK bool
	)
	fs.StringVar(&req.Shell, "shell", "", "a command line, run with bash -l -c")
	fs.StringVar(&req.Cwd, "cwd", "", "working directory (default /workspace)")
	fs.StringVar(&req.Tag, "tag", "", "a name for the process, listed by corral sandbox ps")
	fs.StringVar(&req.User, "user", "", "run as this user of the sandbox (default user; root for root inside)")
	fs.Var(&env, "env", "a NAME=value environment variable (repeatable)")
	fs.BoolVar(&background, "background", false, "print the pid and return; the process runs on")
	fs.BoolVar(&stdinOK, "stdin", false, "send this command's stdin to the process")
	id, rest, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	if (len(rest) == 0) == (req.Shell == "") {
		fmt.Fprintln(os.Stderr, "corral sandbox exec: give a command after -- or --shell, not both")
		return 4
	}
	req.Cmd, req.Env, req.Stdin = rest, env, stdinOK && !background
	ctx, stop := interruptible()
	defer stop()
	sb := cf.client().Sandbox(id)
	p, err := sb.Start(ctx, req)
	if err != nil {
		return callFailed("sandbox exec", err)
	}
	if background {
		fmt.Println(p.PID)
		return 0
	}
	if req.Stdin {
		go func() {
			// The process reads end of file either way; a failed write is
			// said, the exit still awaited.
			if err := p.WriteStdin(ctx, os.Stdin); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "corral sandbox exec: stdin:", strings.TrimPrefix(err.Error(), "corral: "))
			}
			p.CloseStdin(ctx)
		}()
	}
	for ev, err := range p.Events(ctx, 0) {
		if err != nil {
			if ctx.Err() != nil {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if serr := p.Signal(sctx, "SIGTERM"); serr != nil {
					fmt.Fprintf(os.Stderr, "corral sandbox exec: interrupted; signal pid %d: %v\n", p.PID, serr)
				}
				return 130
			}
			return callFailed("sandbox exec", err)
		}
		switch ev.Type {
		case sandbox.ProcessEventStdout:
			os.Stdout.Write(ev.Data)
		case sandbox.ProcessEventStderr:
			os.Stderr.Write(ev.Data)
		case sandbox.ProcessEventDropped:
			fmt.Fprintf(os.Stderr, "corral sandbox exec: %d bytes of output were dropped by the server\n", ev.Dropped)
		case sandbox.ProcessEventEnd:
			if ev.Exit.Error != "" {
				fmt.Fprintf(os.Stderr, "corral sandbox exec: the process's end is unknown: %s\n", ev.Exit.Error)
				return 70
			}
			return ev.Exit.ExitCode
		}
	}
	return callFailed("sandbox exec", io.ErrUnexpectedEOF)
}

func cmdSandboxPs(args []string) int {
	fs, cf := sandboxFlags("ps", "[flags] ID", "Lists a sandbox's processes: those running and the latest that ended.")
	jsonOut := fs.Bool("json", false, "print the list as JSON ({\"processes\": [...]})")
	if code, ok := parseSandbox(fs, args); !ok {
		return code
	}
	id, ok := oneID(fs)
	if !ok {
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	procs, err := cf.client().Sandbox(id).Processes(ctx)
	if err != nil {
		return callFailed("sandbox ps", err)
	}
	if *jsonOut {
		return printJSON(os.Stdout, sandbox.ProcessList{Processes: append([]sandbox.ProcessInfo{}, procs...)})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tSTATE\tTAG\tSTARTED\tCMD")
	for _, p := range procs {
		state := "running"
		if p.Exit != nil {
			state = "exit " + strconv.Itoa(p.Exit.ExitCode)
			if p.Exit.Signal != "" {
				state += " (" + p.Exit.Signal + ")"
			}
		}
		tag := p.Tag
		if tag == "" {
			tag = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", p.PID, state, tag, p.StartedAt.Local().Format("15:04:05"), strings.Join(p.Cmd, " "))
	}
	tw.Flush()
	return 0
}

func cmdSandboxFiles(args []string) int {
	fs, cf := sandboxFlags("files", "[flags] ID (ls [DIR] | cat PATH | put LOCAL|- PATH | rm PATH)",
		"Lists, reads, writes or removes a live sandbox's files. Paths are absolute (anywhere\n"+
			"but /proc, /sys, /dev) or relative to /workspace; put makes the directories on the way.")
	jsonOut := fs.Bool("json", false, "ls and put: print the entries as JSON")
	id, rest, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	// The most arguments of each operation; all but ls take exactly these.
	most := map[string]int{"ls": 2, "cat": 2, "put": 3, "rm": 2}
	if len(rest) == 0 || len(rest) > most[rest[0]] || len(rest) < most[rest[0]] && rest[0] != "ls" {
		fs.Usage()
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	files := cf.client().Sandbox(id).Files()
	var err error
	switch rest[0] {
	case "ls":
		dir := "/workspace"
		if len(rest) > 1 {
			dir = rest[1]
		}
		var entries []sandbox.SandboxFile
		if entries, err = files.List(ctx, dir, 1); err == nil {
			if *jsonOut {
				return printJSON(os.Stdout, append([]sandbox.SandboxFile{}, entries...))
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
			for _, e := range entries {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", e.Type, e.Size, e.ModTime.Local().Format("2006-01-02 15:04:05"), e.Path)
			}
			tw.Flush()
		}
	case "cat":
		err = files.Read(ctx, rest[1], os.Stdout)
	case "put":
		in := io.Reader(os.Stdin)
		if rest[1] != "-" {
			f, oerr := os.Open(rest[1])
			if oerr != nil {
				fmt.Fprintln(os.Stderr, "corral sandbox files:", oerr)
				return 4
			}
			defer f.Close()
			in = f
		}
		var sf *sandbox.SandboxFile
		if sf, err = files.Write(ctx, rest[2], in); err == nil {
			if *jsonOut {
				return printJSON(os.Stdout, sf)
			}
			fmt.Printf("%s (%d bytes)\n", sf.Path, sf.Size)
		}
	case "rm":
		err = files.Remove(ctx, rest[1])
	}
	if err != nil {
		return callFailed("sandbox files "+rest[0], err)
	}
	return 0
}
