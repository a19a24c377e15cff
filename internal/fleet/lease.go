package fleet

import (
	"context"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
)

// Claim is what an execution asks a sandbox for.
type Claim struct {
	Tier runtime.Tier
	Spec runtime.Spec
	// Tenant owns the execution: a sandbox that served one tenant never
	// serves another.
	Tenant string
	Image  images.Image
}

// Zygote is a running zygote (a pre-started interpreter that forks each
// execution): its agent process id (agent.StartRequest.Via), the language
// whose runner started it, the environment it started with, and the CPU
// it keeps to (forking there, its spares copying their pages there), or -1
// where it did not say.
type Zygote struct {
	ID       uint32
	Language string
	Env      []string
	CPU      int
}

// Fate is what becomes of a lent sandbox after its execution, as its
// lender decides: it decides, too, how the execution treats the sandbox
// (whether /workspace was there before it and outlives it, whether other
// processes run beside it).
type Fate uint8

const (
	// Destroyed: the sandbox is fresh, and destroyed after the execution.
	Destroyed Fate = iota
	// Pooled: the sandbox is a warm pool's, reset after a clean execution
	// for the same tenant's next one, destroyed otherwise.
	Pooled
	// Kept: the sandbox is a session's, kept with its /workspace after a
	// clean execution for the session's next one: the execution finds
	// /tmp emptied and collects only the outputs it wrote.
	Kept
	// Held: the sandbox is a live sandbox's, held for the sandbox's life
	// whatever the execution does, with other processes running beside
	// it: the execution resets nothing, reaps nothing it did not start, at
	// its deadline kills its own process group instead of the sandbox,
	// and runs under the sandbox's limits and network (Lease.Env), on its
	// tier and image (Lease.Tier, Lease.Image).
	Held
)

// Lease lends a sandbox to one execution.
type Lease struct {
	Sandbox runtime.Sandbox
	// Fate is what becomes of the sandbox after the execution.
	Fate Fate
	// Zygote, if set, runs in the sandbox and can fork the execution's
	// process (see lang.Zygoter).
	Zygote *Zygote
	// Env, if set, is added to the environment of the execution's
	// processes, below the step's and the request's own variables (a live
	// sandbox's variables and its egress proxy).
	Env map[string]string
	// Tier and Image, when set, are what the lent sandbox runs (a live
	// sandbox's), which the execution's record names instead of its own
	// routing.
	Tier  runtime.Tier
	Image images.Image
	// release gives the sandbox back; clean says the execution ended with
	// the sandbox intact (not killed), so it may serve again.
	release func(clean bool)
}

// NewLease makes a lease of sb, whose fate is fate; release is called
// once, when the execution is done with the sandbox.
func NewLease(sb runtime.Sandbox, fate Fate, z *Zygote, release func(clean bool)) *Lease {
	return &Lease{Sandbox: sb, Fate: fate, Zygote: z, release: release}
}

// Release gives the sandbox back to whoever lent it.
func (l *Lease) Release(clean bool) { l.release(clean) }

// Acquirer lends a sandbox for a claim: a warm pool, a session, or the
// fleet's fresh ones (FreshAcquirer).
type Acquirer interface {
	Acquire(ctx context.Context, c Claim) (*Lease, error)
}

// FreshAcquirer lends fresh sandboxes of a fleet.
type FreshAcquirer struct{ Fleet *Fleet }

// Acquire implements Acquirer.
func (a FreshAcquirer) Acquire(ctx context.Context, c Claim) (*Lease, error) {
	return a.Fleet.Fresh(ctx, c)
}

// Fresh lends a new sandbox made for the claim, destroyed after its
// execution: what an execution gets without a warm pool or a session.
func (f *Fleet) Fresh(ctx context.Context, c Claim) (*Lease, error) {
	sb, err := f.Create(ctx, c.Tier, c.Spec, c.Image, HolderExecution)
	if err != nil {
		return nil, err
	}
	return NewLease(sb, Destroyed, nil, func(bool) { f.Destroy(sb) }), nil
}

// Holders the fleet's users record (Hold).
const (
	// HolderPool: a warm pool keeps it ready.
	HolderPool = "pool"
	// HolderSession: a session keeps it for its next call.
	HolderSession = "session"
	// HolderSandbox: a live sandbox runs on it for its whole life.
	HolderSandbox = "sandbox"
	// HolderExecution: an execution runs in it.
	HolderExecution = "execution"
)
