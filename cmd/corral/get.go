package main

import (
	"errors"
	"flag"
	"os"

	"github.com/corralhq/corral/sandbox"
)

// cmdGet prints an execution's record.
func cmdGet(args []string) int {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	remoteUsage(fs, "[flags] ID",
		"Prints an execution's record. With --wait it first waits until the execution ends\n"+
			"and then exits with a status that mirrors the verdict (as corral exec does).")
	var cf clientFlags
	cf.register(fs)
	jsonOut := fs.Bool("json", false, "print the record as JSON")
	wait := fs.Bool("wait", false, "wait until the execution is final; exit status mirrors the verdict")
	if _, code, ok := parseRemote(fs, args); !ok {
		return code
	}
	id, ok := oneID(fs)
	if !ok {
		return 4
	}
	ctx, stop := interruptible()
	defer stop()
	client := cf.client()
	var res *sandbox.Result
	var err error
	if *wait {
		res, err = client.Wait(ctx, id)
		var sbErr *sandbox.Error
		if errors.As(err, &sbErr) {
			err = nil
		}
	} else {
		res, err = client.GetExecution(ctx, id)
	}
	if err != nil {
		return callFailed("get", err)
	}
	if *jsonOut {
		if code := printJSON(os.Stdout, res); code != 0 || !*wait {
			return code
		}
		return exitStatus(res)
	}
	printRecord(os.Stdout, res)
	if *wait {
		return exitStatus(res)
	}
	return 0
}
