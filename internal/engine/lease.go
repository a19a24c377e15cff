package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/runtime"
)

// Lease lends a sandbox to one execution.
type Lease struct {
	Sandbox runtime.Sandbox
	// Session is true when /workspace outlives the execution: the engine
	// empties /tmp before the program runs and collects only outputs the
	// execution wrote.
	Session bool
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

// Acquirer lends sandboxes: fresh ones by default, a session's own one, or
// (later) warm ones from a pool. An implementation must never return a
// sandbox weaker than spec and tier describe.
type Acquirer interface {
	Acquire(ctx context.Context, tier runtime.Tier, spec runtime.Spec) (*Lease, error)
}

// fresh is the default Acquirer: a new sandbox per execution, destroyed
// after it.
type fresh struct{ e *Engine }

func (f fresh) Acquire(ctx context.Context, tier runtime.Tier, spec runtime.Spec) (*Lease, error) {
	sb, err := f.e.Create(ctx, tier, spec)
	if err != nil {
		return nil, err
	}
	return NewLease(sb, false, func(bool) { f.e.Destroy(sb) }), nil
}

// Create makes a sandbox on the tier's runtime and tracks it for the
// sweeper until Destroy.
func (e *Engine) Create(ctx context.Context, tier runtime.Tier, spec runtime.Spec) (runtime.Sandbox, error) {
	rt, ok := e.runtimes[tier]
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
