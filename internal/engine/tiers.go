package engine

import (
	"errors"
	"fmt"
	"maps"

	"github.com/corralhq/corral/internal/runtime"
)

// ErrTierPending matches a *TierPendingError: the tier an execution needs
// is still being installed on this machine, so the same request may
// succeed later.
var ErrTierPending = errors.New("tier still being installed")

// TierPendingError is Prepare's answer for an execution routed to a tier
// whose runtime is being installed (SetPending). The execution is not run
// on another tier instead: the routing decision stands, only its time has
// not come.
type TierPendingError struct {
	Tier runtime.Tier
	// Reason is the routing decision's ("requested", "auto: untrusted").
	Reason string
}

func (e *TierPendingError) Error() string {
	return fmt.Sprintf("the %s tier (%s) is still being installed on this machine; retry in a few minutes", e.Tier, e.Reason)
}

// Is makes errors.Is(err, ErrTierPending) true.
func (e *TierPendingError) Is(target error) bool { return target == ErrTierPending }

// tierSet is what the engine knows of the tiers at one instant: their
// runtimes, and the tiers without one whose runtime is being installed.
// A published tierSet is never modified; changes publish a new one, so a
// reader sees one consistent instant.
type tierSet struct {
	runtimes map[runtime.Tier]runtime.Runtime
	pending  map[runtime.Tier]bool
}

// runtimeOf returns tier's runtime, if the engine has one.
func (e *Engine) runtimeOf(tier runtime.Tier) (runtime.Runtime, bool) {
	rt, ok := e.tiers.Load().runtimes[tier]
	return rt, ok
}

// change publishes a copy of the tier set modified by f.
func (e *Engine) change(f func(*tierSet)) {
	e.tmu.Lock()
	defer e.tmu.Unlock()
	old := e.tiers.Load()
	ts := &tierSet{runtimes: maps.Clone(old.runtimes), pending: maps.Clone(old.pending)}
	f(ts)
	e.tiers.Store(ts)
}

// SetPending says whether the runtime of a tier the engine lacks is being
// installed (a build in progress). While it is, isolation "auto" still
// routes work to that tier and Prepare refuses such work with a
// *TierPendingError, rather than run it on another tier or call the
// request invalid. Once the build is over without a runtime, SetPending
// false makes the tier plainly unavailable again. It is safe for
// concurrent use; a tier with a runtime is never pending.
func (e *Engine) SetPending(tier runtime.Tier, pending bool) {
	e.change(func(ts *tierSet) {
		if _, ok := ts.runtimes[tier]; pending && !ok {
			ts.pending[tier] = true
		} else {
			delete(ts.pending, tier)
		}
	})
}

// AddRuntime gives the engine the runtime of a tier it has none for: one
// installed while it serves. Executions prepared from then on may use it;
// the tier is no longer pending. It is safe for concurrent use.
func (e *Engine) AddRuntime(rt runtime.Runtime) error {
	var err error
	e.change(func(ts *tierSet) {
		if _, ok := ts.runtimes[rt.Tier()]; ok {
			err = fmt.Errorf("the engine already has a %s runtime", rt.Tier())
			return
		}
		ts.runtimes[rt.Tier()] = rt
		delete(ts.pending, rt.Tier())
	})
	return err
}
