package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestCorralFailures: what fails in Corral rather than in the program is
// internal_error, retryable, in Corral's words (never the runtime's); a
// cancelled caller's is cancelled.
func TestCorralFailures(t *testing.T) {
	f := testenv.FakeEngine(t)
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: "echo ran", Tier: sandbox.TierContainer})
	if err != nil {
		t.Fatal(err)
	}
	secret := errors.New("cgroup file busy at /sys/fs/cgroup/secret")
	f.Runtimes[runtime.TierContainer].SetHook(func(c fake.Call) error {
		if c.Op == "stats" {
			return secret
		}
		return nil
	})
	res := f.Run(t.Context(), job, nil)
	internal := func(what string, res sandbox.Result) {
		t.Helper()
		if res.Status != sandbox.StatusFailed || res.Error == nil || res.Error.Type != sandbox.ErrInternal || !res.Error.Retryable ||
			strings.Contains(res.Error.Message, "secret") {
			t.Errorf("%s: %s %+v; want a retryable internal_error in Corral's words", what, res.Status, res.Error)
		}
	}
	internal("sandbox stats failing", res)
	f.Runtimes[runtime.TierContainer].SetHook(nil)

	// The caller could not get a sandbox (a session's, the pool's).
	job, err = f.Prepare(sandbox.ExecuteRequest{Language: "bash", Code: "echo ran"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Acquire(t.Context(), job, failing{secret}); !errors.Is(err, secret) {
		t.Fatalf("Acquire = %v, want the acquirer's error", err)
	}
	internal("no sandbox", f.Failed(t.Context(), job, secret))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if res := f.Failed(ctx, job, ctx.Err()); res.Status != sandbox.StatusCancelled {
		t.Errorf("no sandbox, the caller gone: %s %+v, want cancelled", res.Status, res.Error)
	}
	if f.AliveCount() != 0 {
		t.Errorf("%d sandboxes left", f.AliveCount())
	}
}

// failing lends no sandbox.
type failing struct{ err error }

func (a failing) Acquire(context.Context, fleet.Claim) (*fleet.Lease, error) { return nil, a.err }
