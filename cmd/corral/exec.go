package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// cmdExec runs code on a server and waits for the result (Execute).
func cmdExec(args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	remoteUsage(fs, "[flags] FILE|-",
		"Runs code on a Corral server and waits for it. The program's stdout and stderr are\n"+
			"printed, then a verdict line on stderr; the exit status mirrors the verdict:\n"+
			"success 0, runtime_error 1, compile_error 2, resource_limit 3, input_error 4,\n"+
			"internal_error 70, timeout 124, cancelled 130, oom 137. Ctrl-C cancels the execution.")
	var cf clientFlags
	var rf requestFlags
	cf.register(fs)
	rf.register(fs)
	id := fs.String("id", "", "execution id (idempotency key; default: a new one)")
	if _, code, ok := parseRemote(fs, args); !ok {
		return code
	}
	req, err := rf.request(fs.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral exec:", err)
		return 4
	}
	req.ExecutionID = *id
	if req.ExecutionID == "" {
		// Known before the call, so an interrupted exec can cancel it.
		req.ExecutionID = sandbox.NewExecutionID()
	}
	ctx, stop := interruptible()
	defer stop()
	client := cf.client()
	res, err := client.Execute(ctx, req)
	var sbErr *sandbox.Error
	switch {
	case err == nil || errors.As(err, &sbErr):
	case ctx.Err() != nil:
		// Interrupted: stop the execution too, as corral run would.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err = client.CancelExecution(cctx, req.ExecutionID)
		if err != nil {
			fmt.Fprintf(os.Stderr, "corral exec: interrupted; cancel %s: %v\n", req.ExecutionID, err)
			return 130
		}
	default:
		return callFailed("exec", err)
	}
	if rf.jsonOut {
		if code := printJSON(os.Stdout, res); code != 0 {
			return code
		}
		return exitStatus(res)
	}
	os.Stdout.WriteString(res.Stdout)
	os.Stderr.WriteString(res.Stderr)
	printVerdict(os.Stderr, res)
	return exitStatus(res)
}
