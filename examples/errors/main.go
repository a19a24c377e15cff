// Command errors provokes each kind of failure and handles it by type, as
// in docs/sdk.md: a failed execution is a *sandbox.Error whose Type
// says what to do; an API error is a *sandbox.APIError (errors.Is with
// ErrNotFound, ErrInvalidRequest, ...); anything else is the transport.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/corralhq/corral/sandbox"
)

func main() {
	client := sandbox.NewClient(sandbox.Config{
		Endpoint:   os.Getenv("CORRAL_ENDPOINT"),
		APIKey:     os.Getenv("CORRAL_API_KEY"),
		Timeout:    time.Minute,
		MaxRetries: 3,
	})
	ctx := context.Background()
	cases := []struct {
		name string
		req  sandbox.ExecuteRequest
	}{
		{"syntax error", sandbox.ExecuteRequest{Language: "python", Code: "print("}},
		{"exception", sandbox.ExecuteRequest{Language: "python", Code: "raise ValueError('bad input')"}},
		{"endless loop", sandbox.ExecuteRequest{Language: "python", Code: "while True: pass",
			Limits: sandbox.Limits{TimeoutMS: 1000}}},
		{"memory balloon", sandbox.ExecuteRequest{Language: "python", Code: "x = bytearray(1 << 30)",
			Limits: sandbox.Limits{MemoryMB: 64}}},
		{"unknown language", sandbox.ExecuteRequest{Language: "cobol", Code: "DISPLAY 'HI'."}},
		{"fine", sandbox.ExecuteRequest{Language: "bash", Code: "echo ok"}},
	}
	for _, c := range cases {
		res, err := client.Execute(ctx, c.req)
		fmt.Printf("%-16s → %s\n", c.name, decide(res, err))
	}
	_, err := client.GetExecution(ctx, "no-such-execution")
	fmt.Printf("%-16s → %s\n", "unknown id", decide(nil, err))
}

// decide is what an agent would do next.
func decide(res *sandbox.Result, err error) string {
	var sbErr *sandbox.Error
	var apiErr *sandbox.APIError
	switch {
	case err == nil:
		return "success: use the output " + fmt.Sprintf("%q", res.Stdout)
	case errors.As(err, &sbErr):
		switch sbErr.Type {
		case sandbox.ErrCompile, sandbox.ErrRuntime:
			// The summary holds stderr and the exit code, cut to fit a
			// prompt, and ends with the next step.
			last := sbErr.Result.Summary[strings.LastIndexByte(sbErr.Result.Summary, '\n')+1:]
			return string(sbErr.Type) + ": feed the summary back to the model to fix the code (" + last + ")"
		case sandbox.ErrTimeout:
			return "timeout: optimise the code or raise limits.timeout_ms"
		case sandbox.ErrOOM:
			return "oom: raise limits.memory_mb or use less memory"
		case sandbox.ErrResourceLimit:
			return "resource_limit: raise the limit that was hit"
		case sandbox.ErrInternal:
			return "internal_error: retry"
		default:
			return string(sbErr.Type) + ": " + sbErr.Message
		}
	case errors.Is(err, sandbox.ErrNotFound):
		return "not_found: the id is wrong or belongs to another tenant"
	case errors.As(err, &apiErr) && apiErr.Status == 400:
		return "invalid_request: fix field " + apiErr.Field
	case errors.As(err, &apiErr):
		return "api error " + apiErr.Code + ": " + apiErr.Message
	default:
		return "transport error: retry later: " + err.Error()
	}
}
