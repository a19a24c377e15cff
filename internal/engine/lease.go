package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/runtime"
)

// Lease lends a sandbox to one execution.
type Lease struct {
	Sandbox runtime.Sandbox
	// Session is true when /workspace outlives the execution: the engine
	// empties /tmp before the program runs and collects only outputs the
	// execution wrote.
	Session bool
	// Zygote, if set, is a pre-started interpreter in the sandbox that can
	// fork the execution's process (see lang.Zygoter).
	Zygote *Zygote
	// release gives the sandbox back; clean says the execution ended with
	// the sandbox intact (not killed), so it may serve again.
	release func(clean bool)
}

// Release gives the sandbox back to whoever lent it.
func (l *Lease) Release(clean bool) { l.release(clean) }

// NewLease makes a lease; release is called once, when the execution is
// done with the sandbox.
func NewLease(sb runtime.Sandbox, session bool, release func(clean bool)) *Lease {
	return &Lease{Sandbox: sb, Session: session, release: release}
}

// Zygote is a running zygote: its agent process id (StartRequest.Via), the
// language whose runner started it and the environment it started with.
type Zygote struct {
	ID       uint32
	Language string
	Env      []string
}

// Claim is what an execution asks a sandbox for.
type Claim struct {
	Tier runtime.Tier
	Spec runtime.Spec
	// Tenant owns the execution: a sandbox that served one tenant never
	// serves another.
	Tenant string
	Image  images.Image
}

// NewLeaseZygote makes a lease of a sandbox running the zygote z (nil:
// none).
func NewLeaseZygote(sb runtime.Sandbox, z *Zygote, release func(clean bool)) *Lease {
	return &Lease{Sandbox: sb, Zygote: z, release: release}
}

// Acquirer lends sandboxes: fresh ones by default, a session's own one, or
// warm ones from a pool. An implementation must never return a sandbox
// weaker than the claim's tier and spec describe.
type Acquirer interface {
	Acquire(ctx context.Context, c Claim) (*Lease, error)
}

// SetPool makes a lends sandboxes to executions that are not in a session
// (by default each gets a fresh one). Call before the first Run.
func (e *Engine) SetPool(a Acquirer) { e.pool = a }

// fresh is the default Acquirer: a new sandbox per execution, destroyed
// after it.
type fresh struct{ e *Engine }

// Fresh returns the Acquirer of fresh sandboxes, destroyed after use.
func (e *Engine) Fresh() Acquirer { return fresh{e} }

func (f fresh) Acquire(ctx context.Context, c Claim) (*Lease, error) {
	sb, err := f.e.Create(ctx, c.Tier, c.Spec)
	if err != nil {
		return nil, err
	}
	return NewLease(sb, false, func(bool) { f.e.Destroy(sb) }), nil
}

// Create makes a sandbox on the tier's runtime and tracks it for the
// sweeper until Destroy.
func (e *Engine) Create(ctx context.Context, tier runtime.Tier, spec runtime.Spec) (runtime.Sandbox, error) {
	rt, ok := e.runtimeOf(tier)
	if !ok {
		return nil, fmt.Errorf("no %s runtime", tier)
	}
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	e.mu.Lock()
	e.live[sb.ID()] = liveSandbox{sb: sb, created: time.Now()}
	e.mu.Unlock()
	return sb, nil
}

// Destroy tears a sandbox down, after the caller's answer when the engine
// is configured so (a server), before it otherwise (a one-shot CLI).
func (e *Engine) Destroy(sb runtime.Sandbox) {
	e.mu.Lock()
	delete(e.live, sb.ID())
	e.mu.Unlock()
	do := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			e.log.Error("destroy sandbox", "sandbox", sb.ID(), "err", err)
		}
	}
	if !e.cfg.DestroyAsync {
		do()
		return
	}
	e.teardown.Add(1)
	go func() {
		defer e.teardown.Done()
		do()
	}()
}

// DestroyNow tears a sandbox down before returning.
func (e *Engine) DestroyNow(ctx context.Context, sb runtime.Sandbox) error {
	e.mu.Lock()
	delete(e.live, sb.ID())
	e.mu.Unlock()
	return sb.Destroy(ctx)
}

// Spec returns the sandbox spec a job needs, language caches included.
func (e *Engine) Spec(ctx context.Context, job *Job) (runtime.Spec, error) {
	overlays, err := e.cacheOverlay(ctx, job.Runner, job.Image)
	if err != nil {
		return runtime.Spec{}, err
	}
	l := job.Req.Limits
	return runtime.Spec{
		Rootfs:   job.Image.Rootfs,
		Mounts:   job.Image.Mounts,
		Overlays: overlays,
		Limits: runtime.Limits{
			MemoryBytes: l.MemoryMB << 20,
			CPUCores:    l.CPUCores,
			Pids:        e.cfg.Pids,
			DiskBytes:   l.DiskMB << 20,
		},
	}, nil
}

// Fixed returns the part of l that a sandbox of tier keeps from its creation
// (see runtime.Fixer): all of it on a runtime that cannot say.
func (e *Engine) Fixed(tier runtime.Tier, l runtime.Limits) runtime.Limits {
	rt, _ := e.runtimeOf(tier)
	if f, ok := rt.(runtime.Fixer); ok {
		return f.Fixed(l)
	}
	return l
}

// WarmSpec returns the spec of a sandbox for language's executions on
// image with the server's default limits: what a warm pool keeps ready.
func (e *Engine) WarmSpec(ctx context.Context, tier runtime.Tier, language, image string) (runtime.Spec, images.Image, error) {
	if _, ok := e.runtimeOf(tier); !ok {
		return runtime.Spec{}, images.Image{}, fmt.Errorf("no %s runtime", tier)
	}
	r, ok := lang.Get(language)
	if !ok {
		return runtime.Spec{}, images.Image{}, fmt.Errorf("unknown language %q", language)
	}
	if image == "" {
		image = e.defaultImage(r)
	}
	img, err := e.images.Resolve(image)
	if err != nil {
		return runtime.Spec{}, images.Image{}, err
	}
	job := &Job{Runner: r, Image: img, Tier: tier}
	job.Req.Limits = e.cfg.Default
	spec, err := e.Spec(ctx, job)
	return spec, img, err
}

// HoldImage marks img in use (so the image store does not evict it) until
// the returned func is called.
func (e *Engine) HoldImage(img images.Image) (func(), error) {
	if h, ok := e.images.(ImageHolder); ok {
		return h.Acquire(img)
	}
	return func() {}, nil
}
