package testenv

import (
	"slices"
	"testing"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/fake"
	"github.com/corralhq/corral/sandbox"
)

// Alive reports whether the fake sandbox id is not destroyed, on either
// tier.
func (f *Fake) Alive(id string) bool {
	for _, rt := range f.Runtimes {
		if slices.ContainsFunc(rt.Live(), func(s *fake.Sandbox) bool { return s.ID() == id }) {
			return true
		}
	}
	return false
}

// AliveCount counts the fake sandboxes not destroyed, on either tier.
func (f *Fake) AliveCount() int {
	n := 0
	for _, rt := range f.Runtimes {
		n += len(rt.Live())
	}
	return n
}

// PythonClaim is what a python execution on tier asks of whoever lends
// its sandbox.
func (f *Fake) PythonClaim(t testing.TB, tier runtime.Tier) fleet.Claim {
	t.Helper()
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "python", Tier: sandbox.Tier(tier)})
	if err != nil {
		t.Fatal(err)
	}
	c, release, err := f.Claim(t.Context(), job)
	if err != nil {
		t.Fatal(err)
	}
	release()
	return c
}

// RunPython runs python code on the container tier as tenant's execution
// with session id, in the sandbox acq lends, and returns its stdout and
// the id of the sandbox it ran in; anything but success fails t.
func (f *Fake) RunPython(t testing.TB, acq fleet.Acquirer, tenant, id, code string) (string, string) {
	t.Helper()
	job, err := f.Prepare(sandbox.ExecuteRequest{Language: "python", Code: code, SessionID: id,
		Tier: sandbox.Tier(runtime.TierContainer)})
	if err != nil {
		t.Fatal(err)
	}
	job.Tenant = tenant
	if err := f.Acquire(t.Context(), job, acq); err != nil {
		t.Fatal(err)
	}
	var sink sandboxSink
	res := f.Run(t.Context(), job, &sink)
	if res.Status != sandbox.StatusSuccess {
		t.Fatalf("execution %s: %+v\n%s", res.Status, res.Error, res.Stderr)
	}
	return res.Stdout, sink.id
}

// sandboxSink records which sandbox an execution ran in.
type sandboxSink struct{ id string }

func (s *sandboxSink) Stdout([]byte)     {}
func (s *sandboxSink) Stderr([]byte)     {}
func (s *sandboxSink) Sandbox(id string) { s.id = id }
