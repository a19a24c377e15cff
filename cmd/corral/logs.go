package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/corralhq/corral/sandbox"
)

// cmdLogs follows an execution's event stream.
func cmdLogs(args []string) int {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	remoteUsage(fs, "[flags] ID",
		"Follows an execution as it runs: its stdout and stderr are printed as they come,\n"+
			"then a verdict line on stderr; the exit status mirrors the verdict. A broken\n"+
			"connection is resumed where it stopped. For a finished execution it prints what\n"+
			"the server still holds of the stream (an hour by default), then the verdict.")
	var cf clientFlags
	cf.register(fs)
	jsonOut := fs.Bool("json", false, "print each event as one JSON line")
	after := fs.Uint64("after", 0, "start after this event id")
	if _, code, ok := parseRemote(fs, args); !ok {
		return code
	}
	id, ok := oneID(fs)
	if !ok {
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	for ev, err := range cf.client().Stream(ctx, id, sandbox.StreamOptions{After: *after}) {
		if err != nil {
			return callFailed("logs", err)
		}
		if *jsonOut {
			if err := enc.Encode(jsonEvent{ID: ev.ID, Type: ev.Type, Text: ev.Text, Status: ev.Status, Result: ev.Result}); err != nil {
				fmt.Fprintln(os.Stderr, "corral logs:", err)
				return 70
			}
		}
		switch ev.Type {
		case sandbox.EventStdout:
			if !*jsonOut {
				os.Stdout.WriteString(ev.Text)
			}
		case sandbox.EventStderr:
			if !*jsonOut {
				os.Stderr.WriteString(ev.Text)
			}
		case sandbox.EventDone:
			if !*jsonOut {
				printVerdict(os.Stderr, ev.Result)
			}
			return exitStatus(ev.Result)
		}
	}
	return 0
}

// jsonEvent is an event as logs --json prints it.
type jsonEvent struct {
	ID     uint64            `json:"id"`
	Type   sandbox.EventType `json:"type"`
	Text   string            `json:"text,omitempty"`
	Status sandbox.Status    `json:"status,omitempty"`
	Result *sandbox.Result   `json:"result,omitempty"`
}
