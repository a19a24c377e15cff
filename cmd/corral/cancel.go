package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/corralhq/corral/sandbox"
)

// cmdCancel stops executions.
func cmdCancel(args []string) int {
	fs := flag.NewFlagSet("cancel", flag.ContinueOnError)
	remoteUsage(fs, "[flags] ID...",
		"Cancels executions: a queued one never runs, a running one is killed. Cancelling a\n"+
			"finished execution changes nothing. Prints each execution's status afterwards.")
	var cf clientFlags
	cf.register(fs)
	jsonOut := fs.Bool("json", false, "print the records as JSON")
	if _, code, ok := parseRemote(fs, args); !ok {
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
	var recs []*sandbox.Result
	for _, id := range fs.Args() {
		res, err := client.CancelExecution(ctx, id)
		if err != nil {
			status = max(status, callFailed("cancel", err))
			continue
		}
		recs = append(recs, res)
		if *jsonOut {
			continue
		}
		switch {
		case res.Status == sandbox.StatusCancelled:
			fmt.Printf("%s: cancelled\n", res.ExecutionID)
		case res.Status.Final():
			fmt.Printf("%s: already finished (%s)\n", res.ExecutionID, res.Status)
		default:
			fmt.Printf("%s: cancel sent, still %s\n", res.ExecutionID, res.Status)
		}
	}
	if *jsonOut {
		var v any = recs
		if len(fs.Args()) == 1 && len(recs) == 1 {
			v = recs[0]
		}
		if code := printJSON(os.Stdout, v); code != 0 {
			return code
		}
	}
	return status
}
