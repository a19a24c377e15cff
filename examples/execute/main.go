// Command execute runs one program synchronously with the Go SDK and prints
// its output (docs/sdk.md): python's sum(range(100)), 4950, then the
// record's summary, the account of the run an agent hands to its model.
//
//	CORRAL_ENDPOINT=http://127.0.0.1:8080 CORRAL_API_KEY=... go run ./examples/execute
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/corralhq/corral/sandbox"
)

func main() {
	client := sandbox.NewClient(sandbox.Config{
		Endpoint:   os.Getenv("CORRAL_ENDPOINT"),
		APIKey:     os.Getenv("CORRAL_API_KEY"),
		Timeout:    60 * time.Second,
		MaxRetries: 3,
	})
	result, err := client.Execute(context.Background(), sandbox.ExecuteRequest{
		Language: "python",
		Code:     "print(sum(range(100)))",
		Limits:   sandbox.Limits{TimeoutMS: 10000, MemoryMB: 256},
	})
	if err != nil {
		slog.Error("execute", "err", err)
		os.Exit(1)
	}
	fmt.Printf("stdout: %s", result.Stdout)
	fmt.Printf("status: %s, exit code %d, %d ms, peak %d MB, tier %s\n",
		result.Status, *result.ExitCode, result.DurationMS, result.PeakMemoryMB, result.Tier)
	// What an agent gives its model: a short, exact account, the same for
	// the same record.
	fmt.Printf("summary for the model:\n%s\n", result.Summary)
}
