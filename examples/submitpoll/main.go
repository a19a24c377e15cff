// Command submitpoll submits a longer program asynchronously and polls for
// its result (docs/sdk.md), then shows the same with Wait and with
// the live event stream.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/corralhq/corral/sandbox"
)

const longRunningCode = `import time
for i in range(3):
    print("step", i, flush=True)
    time.sleep(0.5)
`

func main() {
	ctx := context.Background()
	client := sandbox.NewClient(sandbox.Config{
		Endpoint:   os.Getenv("CORRAL_ENDPOINT"),
		APIKey:     os.Getenv("CORRAL_API_KEY"),
		Timeout:    5 * time.Minute,
		MaxRetries: 3,
	})
	req := sandbox.ExecuteRequest{Language: "python", Code: longRunningCode,
		Limits: sandbox.Limits{TimeoutMS: 300000, MemoryMB: 512}}

	// 1. Submit, then poll every second until the execution is final.
	execID, err := client.Submit(ctx, req)
	if err != nil {
		fail("submit", err)
	}
	fmt.Println("submitted:", execID)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var res *sandbox.Result
	for range ticker.C {
		res, err = client.GetExecution(ctx, execID)
		if err != nil {
			slog.Warn("poll", "err", err) // transient: poll again
			continue
		}
		fmt.Println("polled:", res.Status)
		if res.Status.Final() {
			break
		}
	}
	fmt.Printf("result: %s %q\n", res.Status, res.Stdout)

	// 2. The same, with the SDK's Wait (polls with backoff).
	execID, err = client.Submit(ctx, req)
	if err != nil {
		fail("submit", err)
	}
	res, err = client.Wait(ctx, execID)
	if err != nil {
		fail("wait", err)
	}
	fmt.Printf("waited: %s %q\n", res.Status, res.Stdout)

	// 3. And following the output as it is produced.
	execID, err = client.Submit(ctx, req)
	if err != nil {
		fail("submit", err)
	}
	for ev, err := range client.Stream(ctx, execID, sandbox.StreamOptions{}) {
		if err != nil {
			fail("stream", err)
		}
		switch ev.Type {
		case sandbox.EventStdout:
			fmt.Printf("streamed: %s", ev.Text)
		case sandbox.EventDone:
			fmt.Println("streamed done:", ev.Result.Status)
		}
	}
}

func fail(what string, err error) {
	slog.Error(what, "err", err)
	os.Exit(1)
}
