package engine_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// stubRuntime is a runtime that only names its tier: routing never
// creates sandboxes.
type stubRuntime struct{ tier runtime.Tier }

func (s stubRuntime) Tier() runtime.Tier { return s.tier }
func (s stubRuntime) Create(context.Context, runtime.Spec) (runtime.Sandbox, error) {
	return nil, errors.New("stub runtime")
}
func (s stubRuntime) Reap(context.Context) (int, error) { return 0, nil }

// anyImage resolves every name but "missing".
type anyImage struct{}

func (anyImage) Resolve(name string) (images.Image, error) {
	if name == "missing" {
		return images.Image{}, fmt.Errorf("no image %q", name)
	}
	return images.Image{Name: name, Rootfs: "/nonexistent"}, nil
}

// tiersEngine is an engine with the container tier and gVisor in the given
// state, without root: nothing runs.
func tiersEngine(t *testing.T, gvisor string, mutate ...func(*engine.Config)) *engine.Engine {
	t.Helper()
	rts := []runtime.Runtime{stubRuntime{runtime.TierContainer}}
	if gvisor == "available" {
		rts = append(rts, stubRuntime{runtime.TierGVisor})
	}
	fl := fleet.New(fleet.Config{}, rts, nil, nil)
	cfg := engine.DefaultConfig()
	for _, m := range mutate {
		m(&cfg)
	}
	e, err := engine.New(cfg, fl, anyImage{}, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if gvisor == "pending" {
		fl.SetPending(runtime.TierGVisor, true)
	}
	return e
}

// TestTierStates: what Prepare decides for each request while gVisor is
// available, being installed (pending) or absent. Pending never means a
// different tier: whatever would run on gVisor is refused as retryable.
func TestTierStates(t *testing.T) {
	plain := sandbox.ExecuteRequest{Language: "python", Code: "print(1)"}
	risky := sandbox.ExecuteRequest{Language: "python", Code: "import subprocess"}
	untrusted := sandbox.ExecuteRequest{Language: "python", Code: "print(1)", Untrusted: true}
	long := sandbox.ExecuteRequest{Language: "python", Code: "print(1)", Limits: sandbox.Limits{TimeoutMS: 60000}}
	explicit := sandbox.ExecuteRequest{Language: "python", Code: "print(1)", Isolation: sandbox.IsolationGVisor}
	container := sandbox.ExecuteRequest{Language: "python", Code: "import subprocess", Isolation: sandbox.IsolationContainer}
	badImage := sandbox.ExecuteRequest{Language: "python", Code: "print(1)", Isolation: sandbox.IsolationGVisor, Image: "missing"}

	// want: a tier, "pending" or "invalid:<field>".
	cases := []struct {
		gvisor string
		req    sandbox.ExecuteRequest
		want   string
		reason string
	}{
		{"available", plain, "container", "auto: no risky constructs"},
		{"available", risky, "gvisor", "auto: python uses subprocess (line 1)"},
		{"available", explicit, "gvisor", "requested"},
		{"available", container, "container", "requested"},

		{"pending", plain, "container", "auto: no risky constructs"},
		{"pending", container, "container", "requested"},
		{"pending", risky, "pending", "auto: python uses subprocess (line 1)"},
		{"pending", untrusted, "pending", "auto: untrusted"},
		{"pending", long, "pending", "auto: timeout_ms 60000 > 30000"},
		{"pending", explicit, "pending", "requested"},
		// What the caller must fix is said before what time fixes.
		{"pending", badImage, "invalid:image", ""},

		{"absent", plain, "container", "auto: no risky constructs"},
		{"absent", risky, "container", "auto: python uses subprocess (line 1); the gvisor tier is unavailable here, so container"},
		{"absent", explicit, "invalid:isolation", ""},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%s %s", c.gvisor, cmp.Or(c.req.Isolation, sandbox.IsolationAuto), c.reason)
		t.Run(name, func(t *testing.T) {
			e := tiersEngine(t, c.gvisor)
			job, err := e.Prepare(c.req)
			var pe *engine.TierPendingError
			var ie *validate.InputError
			switch {
			case c.want == "pending":
				if !errors.Is(err, engine.ErrTierPending) || !errors.As(err, &pe) {
					t.Fatalf("Prepare = %v, %v; want a TierPendingError", job, err)
				}
				if pe.Tier != runtime.TierGVisor || pe.Reason != c.reason {
					t.Errorf("pending %s (%q), want gvisor (%q)", pe.Tier, pe.Reason, c.reason)
				}
				if errors.As(err, &ie) {
					t.Errorf("a pending tier is also an input error: %v", err)
				}
			case len(c.want) > 8 && c.want[:8] == "invalid:":
				if !errors.As(err, &ie) || ie.Field != c.want[8:] {
					t.Fatalf("Prepare = %v; want an input error on %s", err, c.want[8:])
				}
			default:
				if err != nil {
					t.Fatalf("Prepare: %v", err)
				}
				if string(job.Tier) != c.want || job.TierReason != c.reason {
					t.Errorf("routed to %s (%q), want %s (%q)", job.Tier, job.TierReason, c.want, c.reason)
				}
			}
		})
	}
}

// TestTierArrives: a pending tier becomes usable when its runtime is
// added, and plainly unavailable when the build ends without one.
func TestTierArrives(t *testing.T) {
	risky := sandbox.ExecuteRequest{Language: "python", Code: "import subprocess"}

	e := tiersEngine(t, "pending")
	if _, err := e.Prepare(risky); !errors.Is(err, engine.ErrTierPending) {
		t.Fatalf("before: %v, want pending", err)
	}
	if err := e.Fleet().AddRuntime(stubRuntime{runtime.TierGVisor}); err != nil {
		t.Fatal(err)
	}
	job, err := e.Prepare(risky)
	if err != nil || job.Tier != runtime.TierGVisor {
		t.Fatalf("after AddRuntime: %v, %v; want gvisor", job, err)
	}
	if err := e.Fleet().AddRuntime(stubRuntime{runtime.TierGVisor}); err == nil {
		t.Error("a second gvisor runtime was accepted")
	}
	e.Fleet().SetPending(runtime.TierGVisor, true) // no effect on a tier that is here
	if job, err := e.Prepare(risky); err != nil || job.Tier != runtime.TierGVisor {
		t.Errorf("SetPending on a present tier: %v, %v", job, err)
	}

	gone := tiersEngine(t, "pending")
	gone.Fleet().SetPending(runtime.TierGVisor, false)
	job, err = gone.Prepare(risky)
	if err != nil || job.Tier != runtime.TierContainer {
		t.Fatalf("after the build ended: %v, %v; want container", job, err)
	}
}

// TestTierArrivesConcurrently runs Prepare while the tier arrives (go test
// -race checks the engine's tier set).
func TestTierArrivesConcurrently(t *testing.T) {
	e := tiersEngine(t, "pending")
	risky := sandbox.ExecuteRequest{Language: "python", Code: "import subprocess"}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				job, err := e.Prepare(risky)
				if err == nil && job.Tier != runtime.TierGVisor || err != nil && !errors.Is(err, engine.ErrTierPending) {
					t.Errorf("Prepare = %v, %v; want gvisor or pending", job, err)
					return
				}
			}
		}()
	}
	if err := e.Fleet().AddRuntime(stubRuntime{runtime.TierGVisor}); err != nil {
		t.Error(err)
	}
	wg.Wait()
	if job, err := e.Prepare(risky); err != nil || job.Tier != runtime.TierGVisor {
		t.Errorf("after: %v, %v", job, err)
	}
}
