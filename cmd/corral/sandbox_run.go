package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// cmdSandboxRun runs code as the next cell of a code context: variables,
// imports and functions persist from one run to the next.
func cmdSandboxRun(args []string) int {
	fs, cf := sandboxFlags("run", "[flags] ID [flags] (CODE | -)",
		"Runs code in a code context of a live sandbox, like a notebook cell: the variables,\n"+
			"imports and functions of earlier runs in the same context are there. Without\n"+
			"--context a new context is made and its id printed on stderr (\"context: ID\"): give\n"+
			"it to the next run. stdout and stderr are streamed as they come; the text/plain of\n"+
			"each result is printed on stdout (other forms are named); an error prints its\n"+
			"traceback on stderr and exits 1. CODE - reads the code from stdin.")
	var (
		cid, lang string
		timeout   time.Duration
		jsonOut   bool
	)
	fs.StringVar(&cid, "context", "", "the context to run in (default: make one)")
	fs.StringVar(&lang, "language", "python", "the language of a context made here: python, bash or javascript")
	fs.DurationVar(&timeout, "timeout", 0, "interrupt the cell after this long (0: none)")
	fs.BoolVar(&jsonOut, "json", false, "print the cell's events as JSON ({\"events\": [...]})")
	id, rest, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	if len(rest) != 1 {
		fmt.Fprintln(os.Stderr, "corral sandbox run: give the code as one argument, or - to read it from stdin")
		return 4
	}
	src := rest[0]
	if src == "-" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "corral sandbox run: read stdin:", err)
			return 74
		}
		src = string(b)
	}
	ctx, stop := interruptible()
	defer stop()
	sb := cf.client().Sandbox(id)
	if cid == "" {
		c, err := sb.CreateContext(ctx, sandbox.ContextRequest{Language: lang})
		if err != nil {
			return callFailed("sandbox run", err)
		}
		cid = c.ID
		fmt.Fprintln(os.Stderr, "context:", cid)
	}
	var events []sandbox.ContextEvent
	ex, err := sb.RunCode(ctx, cid, src, sandbox.RunCodeOptions{Timeout: timeout, OnEvent: func(ev sandbox.ContextEvent) {
		if jsonOut {
			events = append(events, ev)
			return
		}
		printCellEvent(ev)
	}})
	if err != nil {
		return callFailed("sandbox run", err)
	}
	if jsonOut {
		if code := printJSON(os.Stdout, sandbox.ContextEventList{Events: events}); code != 0 {
			return code
		}
	}
	if ex.Error != nil {
		return 1
	}
	return 0
}

// printCellEvent shows one event of a cell as a terminal would.
func printCellEvent(ev sandbox.ContextEvent) {
	switch ev.Type {
	case sandbox.ContextEventStdout:
		fmt.Print(ev.Text)
	case sandbox.ContextEventStderr:
		fmt.Fprint(os.Stderr, ev.Text)
	case sandbox.ContextEventResult:
		if text, ok := ev.Data["text/plain"]; ok {
			fmt.Println(text)
		}
		var other []string
		for mime := range ev.Data {
			if mime != "text/plain" {
				other = append(other, mime)
			}
		}
		if len(other) > 0 {
			sort.Strings(other)
			fmt.Fprintf(os.Stderr, "[result also as %s; --json shows it]\n", strings.Join(other, ", "))
		}
	case sandbox.ContextEventError:
		if len(ev.Traceback) > 0 {
			fmt.Fprintln(os.Stderr, strings.Join(ev.Traceback, "\n"))
		} else {
			fmt.Fprintf(os.Stderr, "%s: %s\n", ev.Name, ev.Value)
		}
	}
}
