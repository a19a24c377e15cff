// Package sandbox is the Go client for Corral, a service that runs untrusted,
// model-generated code in isolated, limited sandboxes, and the wire types that
// the server shares with it.
//
// It depends on the standard library only, so an agent that imports it pulls
// in nothing else.
//
//	client := sandbox.NewClient(sandbox.Config{
//		Endpoint:   os.Getenv("CORRAL_ENDPOINT"),
//		APIKey:     os.Getenv("CORRAL_API_KEY"),
//		Timeout:    60 * time.Second,
//		MaxRetries: 3,
//	})
//	res, err := client.Execute(ctx, sandbox.ExecuteRequest{
//		Language: "python",
//		Code:     "print(sum(range(100)))",
//		Limits:   sandbox.Limits{TimeoutMS: 10000, MemoryMB: 256},
//	})
//	var sbErr *sandbox.Error
//	switch {
//	case errors.As(err, &sbErr): // the code failed: sbErr.Type, sbErr.Result.Stderr
//	case err != nil: // the call failed: *APIError, *TransportError or the context
//	default:
//		fmt.Print(res.Stdout) // 4950
//	}
//
// Every final Result carries Summary, the short account of the execution to
// give a model instead of the raw output: on success the exit code, the
// first 20 lines of stdout and the artifact names; on failure the error
// type, stderr, the exit code and the next step.
//
// Execute waits for the result; Submit returns an execution id at once, to
// be followed with GetExecution, Wait, Stream (Server-Sent Events, resumed
// after a broken connection) or a signed callback (ReadCallback,
// VerifyCallback). List queries past executions. Cancel stops one.
//
// Live sandboxes (CreateSandbox, Client.Sandbox) stay up between calls:
// processes started in one (Sandbox.Start) run on, their events are
// followed with Process.Events (an iterator, resumed after a broken
// connection, from the start for a client that connects late), and their
// files are read and written by path (Sandbox.Files).
//
// Retries are made only where repeating a call cannot run code twice:
// reads, cancels, and submits, which always carry an execution id (the
// client generates one when the request has none, and the server treats the
// same id with the same request as the same execution).
package sandbox
