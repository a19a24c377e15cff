package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// cmdLs queries past and current executions.
func cmdLs(args []string) int {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	remoteUsage(fs, "[flags]",
		"Lists executions, newest first unless --sort says otherwise, one page (--limit) at a\n"+
			"time; the next page's cursor is printed on stderr. --all follows every page.")
	var cf clientFlags
	cf.register(fs)
	var (
		opts                    sandbox.ListOptions
		status, errType, exitNe string
		since, until            string
		jsonOut, all            bool
	)
	fs.StringVar(&opts.SessionID, "session", "", "only this session's executions")
	fs.StringVar(&status, "status", "", "queued, running, success, failed or cancelled")
	fs.StringVar(&errType, "error-type", "", "compile_error, runtime_error, timeout, oom, resource_limit, internal_error, input_error or cancelled")
	fs.StringVar(&opts.Language, "lang", "", "only this language")
	fs.StringVar(&exitNe, "exit-code-ne", "", "only executions whose exit code is not this (0: the ones that exited non-zero)")
	fs.StringVar(&opts.Sort, "sort", "", "created_at, -created_at (default), duration_ms or -duration_ms")
	fs.IntVar(&opts.Limit, "limit", 20, "page size, 1 to 1000")
	fs.StringVar(&opts.Cursor, "cursor", "", "continue from a previous page")
	fs.StringVar(&since, "since", "", "created at or after: an RFC 3339 time, or a duration ago such as 1h")
	fs.StringVar(&until, "until", "", "created before: an RFC 3339 time, or a duration ago")
	fs.BoolVar(&jsonOut, "json", false, "print the page as JSON ({\"executions\": [...], \"next_cursor\": ...})")
	fs.BoolVar(&all, "all", false, "follow the cursor through every page")
	if _, code, ok := parseRemote(fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 4
	}
	opts.Status = sandbox.Status(status)
	opts.ErrorType = sandbox.ErrorType(errType)
	if exitNe != "" {
		n, err := strconv.Atoi(exitNe)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corral ls: --exit-code-ne %q: not an integer\n", exitNe)
			return 4
		}
		opts.ExitCodeNe = &n
	}
	if !parseWindow("corral ls", since, until, &opts.Since, &opts.Until) {
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	client := cf.client()
	page := &sandbox.Page{Executions: []sandbox.Result{}}
	for {
		p, err := client.List(ctx, opts)
		if err != nil {
			return callFailed("ls", err)
		}
		page.Executions = append(page.Executions, p.Executions...)
		page.NextCursor = p.NextCursor
		if !all || p.NextCursor == "" {
			break
		}
		opts.Cursor = p.NextCursor
	}
	if jsonOut {
		return printJSON(os.Stdout, page)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXECUTION\tSTATUS\tERROR\tLANGUAGE\tEXIT\tDURATION\tCREATED\tSESSION")
	for _, r := range page.Executions {
		errType, exit := "-", "-"
		if r.Error != nil {
			errType = string(r.Error.Type)
		}
		if r.ExitCode != nil {
			exit = strconv.Itoa(*r.ExitCode)
		}
		session := r.SessionID
		if session == "" {
			session = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d ms\t%s\t%s\n", r.ExecutionID, r.Status, errType, r.Language, exit,
			r.DurationMS, r.CreatedAt.Local().Format("2006-01-02 15:04:05"), session)
	}
	tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(os.Stderr, "more: corral ls --cursor %s (or --all)\n", page.NextCursor)
	}
	return 0
}

// parseWhen reads an RFC 3339 time or a duration before now ("90m").
func parseWhen(s string) (time.Time, error) {
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return t, nil
}

// parseWindow parses the --since and --until values (parseWhen; empty:
// unset) of command into *from and *to; false, after saying why on
// stderr, when one is not a time.
func parseWindow(command, since, until string, from, to *time.Time) bool {
	for _, t := range []struct {
		name, value string
		dst         *time.Time
	}{{"since", since, from}, {"until", until, to}} {
		if t.value == "" {
			continue
		}
		ts, err := parseWhen(t.value)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: --%s: %v\n", command, t.name, err)
			return false
		}
		*t.dst = ts
	}
	return true
}
