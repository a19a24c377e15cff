// Package cancel measures how long a cancel takes to end an execution
// while the server is busy: cancels that land while the execution is
// queued, while its sandbox is being created or started, and while its
// program runs, on both tiers, during a burst of other executions.
package cancel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	cancels    = 200 // per tier
	cancellers = 8   // cancels in flight at once
	burst      = 32  // other executions running meanwhile
	// limit is the slowest a cancel may be.
	limit = 3 * time.Second
)

// TestCancelUnderBurst: on each tier, 200 executions of `sleep 60` are
// cancelled at a random moment between 0 and 1.5 s after their submission
// while 32 other executions run; every one must end cancelled within 3 s
// of the cancel, and the note takes the p50 and p99 from the log.
func TestCancelUnderBurst(t *testing.T) {
	s := testserver.Start(t, testserver.Options{})
	c := sandbox.NewClient(sandbox.Config{Endpoint: s.URL, APIKey: testserver.AlphaKey, Timeout: 2 * time.Minute, MaxRetries: 3})
	for _, tier := range []sandbox.Isolation{sandbox.IsolationContainer, sandbox.IsolationGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			ctx, stop := context.WithCancel(t.Context())
			var load sync.WaitGroup
			for i := range burst {
				load.Go(func() { busy(ctx, t, c, i) })
			}
			lat := make([]time.Duration, cancels)
			work := make(chan int)
			var wg sync.WaitGroup
			for range cancellers {
				wg.Go(func() {
					for i := range work {
						d, was, err := cancelOne(t.Context(), c, tier, i)
						if err != nil {
							t.Errorf("cancel %d: %v", i, err)
						}
						if d > time.Second {
							t.Logf("cancel %d took %v: it was %s", i, d.Round(time.Millisecond), was)
						}
						lat[i] = d
					}
				})
			}
			for i := range cancels {
				work <- i
			}
			close(work)
			wg.Wait()
			stop()
			load.Wait()
			slices.Sort(lat)
			p50, p99, worst := lat[len(lat)/2], lat[(len(lat)*99+99)/100-1], lat[len(lat)-1]
			t.Logf("%s: %d cancels during a burst of %d: p50 %v, p99 %v, max %v", tier, cancels, burst,
				p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond))
			if worst > limit {
				t.Errorf("the slowest cancel took %v, more than %v", worst, limit)
			}
		})
	}
}

// cancelOne submits `sleep 60` on tier, cancels it after a random pause
// and returns the time from the cancel to the record saying cancelled, and
// the status the execution had just before the cancel.
func cancelOne(ctx context.Context, c *sandbox.Client, tier sandbox.Isolation, i int) (time.Duration, sandbox.Status, error) {
	id, err := c.Submit(ctx, sandbox.ExecuteRequest{ExecutionID: fmt.Sprintf("cancel-%s-%03d-%d", tier, i, rand.Int64()),
		Language: "bash", Code: "sleep 60", Isolation: tier, Limits: sandbox.Limits{TimeoutMS: 120_000}})
	if err != nil {
		return 0, "", err
	}
	time.Sleep(rand.N(1500 * time.Millisecond))
	before, err := c.GetExecution(ctx, id)
	if err != nil {
		return 0, "", err
	}
	start := time.Now()
	if err := c.Cancel(ctx, id); err != nil {
		return 0, "", err
	}
	for {
		r, err := c.GetExecution(ctx, id)
		if err != nil {
			return 0, "", err
		}
		if r.Status.Final() {
			took := time.Since(start)
			if r.Status != sandbox.StatusCancelled {
				return took, before.Status, fmt.Errorf("%s was %s when cancelled and ended %s %+v", id, before.Status, r.Status, r.Error)
			}
			return took, before.Status, nil
		}
		if time.Since(start) > time.Minute {
			return time.Since(start), before.Status, fmt.Errorf("%s (%s when cancelled) still %s a minute after its cancel", id, before.Status, r.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// busy keeps one execution running until ctx ends: short programs of both
// tiers, the container's through its warm pool.
func busy(ctx context.Context, t *testing.T, c *sandbox.Client, i int) {
	reqs := []sandbox.ExecuteRequest{
		{Language: "python", Code: "print(sum(i * i for i in range(200000)))"},
		{Language: "bash", Code: "for i in $(seq 200); do :; done; sleep 0.2", Isolation: sandbox.IsolationContainer},
		{Language: "bash", Code: "sleep 0.3", Isolation: sandbox.IsolationGVisor},
	}
	for n := 0; ctx.Err() == nil; n++ {
		req := reqs[(i+n)%len(reqs)]
		if _, err := c.Execute(ctx, req); err != nil && ctx.Err() == nil {
			var se *sandbox.Error
			if !errors.As(err, &se) {
				t.Errorf("burst execution: %v", err)
				return
			}
		}
	}
}
