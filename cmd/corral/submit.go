package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/corralhq/corral/sandbox"
)

// cmdSubmit queues code on a server and prints its execution id at once.
func cmdSubmit(args []string) int {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	remoteUsage(fs, "[flags] FILE|-",
		"Queues code on a Corral server and prints the execution id at once. Follow it with\n"+
			"corral logs ID, corral get --wait ID, or a callback URL.")
	var cf clientFlags
	var rf requestFlags
	cf.register(fs)
	rf.register(fs)
	id := fs.String("id", "", "execution id (idempotency key; default: a new one)")
	callback := fs.String("callback-url", "", "URL that receives the signed record when the execution ends")
	if _, code, ok := parseRemote(fs, args); !ok {
		return code
	}
	req, err := rf.request(fs.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral submit:", err)
		return 4
	}
	req.ExecutionID = *id
	req.CallbackURL = *callback
	ctx, stop := interruptible()
	defer stop()
	execID, err := cf.client().Submit(ctx, req)
	if err != nil {
		return callFailed("submit", err)
	}
	if rf.jsonOut {
		return printJSON(os.Stdout, sandbox.Submitted{ExecutionID: execID, Status: sandbox.StatusQueued})
	}
	fmt.Println(execID)
	return 0
}
