// Package fleet owns the life of a node's sandboxes: it creates them from a
// spec on their tier's runtime (and holds their image while they live),
// keeps one registry of every sandbox with who holds it — the warm pool, a
// session, an execution — resets a used sandbox for its next execution,
// destroys them (after the caller's answer, on a server), and sweeps those
// whose holder let them go stale. The engine, the pool and sessions all
// get their sandboxes here; nobody else creates or destroys one.
package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/tracing"
)

// Config configures a fleet.
type Config struct {
	// DestroyAsync tears sandboxes down in the background (a server:
	// after the answer); otherwise before Destroy returns (a one-shot
	// CLI, tests that count what is left).
	DestroyAsync bool
}

// ImageLocker marks an image in use, so the image store does not evict
// it, until the returned func is called (images.Store).
type ImageLocker interface {
	Lock(img images.Image) (unlock func(), err error)
}

// Fleet is a node's sandboxes. It is safe for concurrent use.
type Fleet struct {
	cfg    Config
	images ImageLocker // nil: images need no lock
	log    *slog.Logger

	// tiers holds the current *tierSet; tmu serialises its changes.
	tmu   sync.Mutex
	tiers atomic.Pointer[tierSet]

	mu   sync.Mutex
	live map[string]*entry // by sandbox id

	teardown sync.WaitGroup
}

// entry is a sandbox in the registry; its fields are guarded by Fleet.mu.
type entry struct {
	sb          runtime.Sandbox
	unlockImage func() // unlocks the image
	created     time.Time
	holder      string
	// until, when set, is when the holder should have let go: past it
	// the sandbox is stuck and Sweep destroys it.
	until time.Time
}

// New returns a fleet over the given runtimes (at most one per tier; more
// can come later, see AddRuntime). images may be nil.
func New(cfg Config, rts []runtime.Runtime, imgs ImageLocker, log *slog.Logger) *Fleet {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ts := &tierSet{runtimes: map[runtime.Tier]runtime.Runtime{}, pending: map[runtime.Tier]bool{}}
	for _, rt := range rts {
		ts.runtimes[rt.Tier()] = rt
	}
	f := &Fleet{cfg: cfg, images: imgs, log: log, live: map[string]*entry{}}
	f.tiers.Store(ts)
	return f
}

// Close waits for sandboxes being torn down.
func (f *Fleet) Close() { f.teardown.Wait() }

// Create makes a sandbox from spec on tier's runtime, holding img for as
// long as it lives, and registers it as holder's.
func (f *Fleet) Create(ctx context.Context, tier runtime.Tier, spec runtime.Spec, img images.Image, holder string) (_ runtime.Sandbox, err error) {
	ctx, span := tracing.StartChild(ctx, "sandbox.create")
	defer func() { tracing.End(span, err) }()
	if span.IsRecording() {
		span.SetAttributes(attribute.String("corral.tier", string(tier)), attribute.String("corral.image", img.Name),
			attribute.String("corral.holder", holder))
	}
	rt, ok := f.Runtime(tier)
	if !ok {
		return nil, fmt.Errorf("no %s runtime", tier)
	}
	unlockImage := func() {}
	if f.images != nil && img.Digest != "" {
		u, err := f.images.Lock(img)
		if err != nil {
			return nil, fmt.Errorf("lock image %s: %w", img.Name, err)
		}
		unlockImage = u
	}
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		unlockImage()
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	f.mu.Lock()
	f.live[sb.ID()] = &entry{sb: sb, unlockImage: unlockImage, created: time.Now(), holder: holder}
	f.mu.Unlock()
	return sb, nil
}

// Hold records that holder holds sb now; with until set, it is stuck if
// holder still has it then (Sweep). A sandbox the fleet does not know
// (destroyed meanwhile) is left alone.
func (f *Fleet) Hold(sb runtime.Sandbox, holder string, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.live[sb.ID()]; ok {
		e.holder, e.until = holder, until
	}
}

// Holder returns who holds sandbox id, and whether the fleet knows it.
func (f *Fleet) Holder(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.live[id]
	if !ok {
		return "", false
	}
	return e.holder, true
}

// Count returns how many sandboxes each holder has.
func (f *Fleet) Count() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, e := range f.live {
		out[e.holder]++
	}
	return out
}

// take removes sb from the registry, returning its entry (nil if it was
// not there: destroyed already).
func (f *Fleet) take(sb runtime.Sandbox) *entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.live[sb.ID()]
	delete(f.live, sb.ID())
	return e
}

// Destroy tears sb down: in the background when the fleet is configured
// so (a server: after the caller's answer), before it returns otherwise.
func (f *Fleet) Destroy(sb runtime.Sandbox) {
	e := f.take(sb)
	do := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		f.destroy(ctx, sb, e)
	}
	if !f.cfg.DestroyAsync {
		do()
		return
	}
	f.teardown.Add(1)
	go func() {
		defer f.teardown.Done()
		do()
	}()
}

// DestroyNow tears sb down before returning: a session's disk must be free
// for its next sandbox.
func (f *Fleet) DestroyNow(ctx context.Context, sb runtime.Sandbox) error {
	return f.destroy(ctx, sb, f.take(sb))
}

func (f *Fleet) destroy(ctx context.Context, sb runtime.Sandbox, e *entry) error {
	ctx, span := tracing.StartChild(ctx, "sandbox.destroy")
	if span.IsRecording() {
		span.SetAttributes(attribute.String("corral.runtime_sandbox", sb.ID()))
	}
	err := sb.Destroy(ctx)
	tracing.End(span, err)
	if e != nil {
		e.unlockImage()
	}
	if err != nil {
		f.log.Error("destroy sandbox", "sandbox", sb.ID(), "err", err)
		return fmt.Errorf("destroy sandbox %s: %w", sb.ID(), err)
	}
	return nil
}

// Sweep destroys the sandboxes whose holder kept them past the time it
// said it would let go (an execution stuck past twice its limit): a
// safety net, since the engine's own deadline should have ended them. It
// returns how many it destroyed.
func (f *Fleet) Sweep(ctx context.Context, now time.Time) int {
	f.mu.Lock()
	var doomed []*entry
	for id, e := range f.live {
		if !e.until.IsZero() && now.After(e.until) {
			doomed = append(doomed, e)
			delete(f.live, id)
		}
	}
	f.mu.Unlock()
	for _, e := range doomed {
		f.log.Warn("sweep a stuck sandbox", "sandbox", e.sb.ID(), "holder", e.holder)
		_ = f.destroy(ctx, e.sb, e)
	}
	return len(doomed)
}

// tierSet is what the fleet knows of the tiers at one instant: their
// runtimes, and the tiers without one whose runtime is being installed. A
// published tierSet is never modified; changes publish a new one, so a
// reader sees one consistent instant.
type tierSet struct {
	runtimes map[runtime.Tier]runtime.Runtime
	pending  map[runtime.Tier]bool
}

// Runtime returns tier's runtime, if the fleet has one.
func (f *Fleet) Runtime(tier runtime.Tier) (runtime.Runtime, bool) {
	rt, ok := f.tiers.Load().runtimes[tier]
	return rt, ok
}

// Pending reports whether tier's runtime is being installed.
func (f *Fleet) Pending(tier runtime.Tier) bool { return f.tiers.Load().pending[tier] }

// Tiers is the fleet's tiers at one instant: a decision made from it sees
// one consistent state even while a tier arrives.
type Tiers struct{ set *tierSet }

// Snapshot returns the tiers as they are now.
func (f *Fleet) Snapshot() Tiers { return Tiers{f.tiers.Load()} }

// Ready reports whether tier has a runtime.
func (t Tiers) Ready(tier runtime.Tier) bool {
	_, ok := t.set.runtimes[tier]
	return ok
}

// Pending reports whether tier's runtime is being installed.
func (t Tiers) Pending(tier runtime.Tier) bool { return t.set.pending[tier] }

// Tiers lists the tiers with a runtime, sorted.
func (f *Fleet) Tiers() []runtime.Tier {
	return slices.Sorted(maps.Keys(f.tiers.Load().runtimes))
}

// change publishes a copy of the tier set modified by fn.
func (f *Fleet) change(fn func(*tierSet)) {
	f.tmu.Lock()
	defer f.tmu.Unlock()
	old := f.tiers.Load()
	ts := &tierSet{runtimes: maps.Clone(old.runtimes), pending: maps.Clone(old.pending)}
	fn(ts)
	f.tiers.Store(ts)
}

// SetPending says whether the runtime of a tier the fleet lacks is being
// installed (a build in progress): the engine routes work to such a tier
// and refuses it as retryable rather than run it on another one. Once the
// build is over without a runtime, SetPending false makes the tier plainly
// unavailable again. A tier with a runtime is never pending.
func (f *Fleet) SetPending(tier runtime.Tier, pending bool) {
	f.change(func(ts *tierSet) {
		if _, ok := ts.runtimes[tier]; pending && !ok {
			ts.pending[tier] = true
		} else {
			delete(ts.pending, tier)
		}
	})
}

// AddRuntime gives the fleet the runtime of a tier it has none for: one
// installed while it serves. The tier is no longer pending.
func (f *Fleet) AddRuntime(rt runtime.Runtime) error {
	var err error
	f.change(func(ts *tierSet) {
		if _, ok := ts.runtimes[rt.Tier()]; ok {
			err = fmt.Errorf("the fleet already has a %s runtime", rt.Tier())
			return
		}
		ts.runtimes[rt.Tier()] = rt
		delete(ts.pending, rt.Tier())
	})
	return err
}

// Fixed returns the part of l that a sandbox of tier keeps from its
// creation (see runtime.Fixer): all of it on a runtime that cannot say.
func (f *Fleet) Fixed(tier runtime.Tier, l runtime.Limits) runtime.Limits {
	rt, _ := f.Runtime(tier)
	if fx, ok := rt.(runtime.Fixer); ok {
		return fx.Fixed(l)
	}
	return l
}
