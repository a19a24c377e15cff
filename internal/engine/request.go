package engine

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/router"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// SandboxRequest is what a sandbox is asked for, whoever asks: an
// execution (Prepare makes it from the execution's request), a live
// sandbox, a session's file calls. Its fields are the caller's, as its
// client sent them: PrepareSandbox's refusals name them as Names says.
type SandboxRequest struct {
	// Tenant owns the sandbox: one that served a tenant never serves
	// another.
	Tenant string
	// Language picks the runner (its caches, its default image); Image
	// names another image.
	Language, Image string
	// Tier is container, gvisor, or auto (or empty): routed by what
	// Code, TimeoutMS and Untrusted say of the work.
	Tier   sandbox.Tier
	Limits Limits
	// Env are the caller's variables for what runs in the sandbox.
	Env map[string]string
	// Network is the caller's allowlist, narrowed by the server's policy;
	// nil is no network.
	Network *sandbox.Network
	// Code, TimeoutMS and Untrusted are what auto routing weighs: an
	// execution's. A live sandbox asks with none.
	Code      string
	TimeoutMS int64
	Untrusted bool
	// System asks for a machine of its own (a live sandbox): a writable
	// root and users (runtime.Spec.System).
	System bool
	Names  Names
}

// Limits are a sandbox's limits. Zero takes the server's default
// (Config.Default, Config.Pids). MemoryMB and CPUCores are bounded by the
// server's maximum (Config.Max); DiskMB and Pids by whoever asks (an
// execution's disk by Config.Max, in Prepare; a live sandbox's disk and
// processes by the live sandboxes' own configuration).
type Limits struct {
	MemoryMB int64
	CPUCores float64
	DiskMB   int64
	Pids     int64
}

// Names are the names the caller's request gave the fields a refusal may
// name, where a release accepts an old one as well (validate.Renamed
// returns it). Empty is the field's own name.
type Names struct {
	// Tier is "tier", or an execution's "isolation".
	Tier string
	// CPUCores is "limits.cpu_cores", or a live sandbox's "limits.cpus".
	CPUCores string
}

func (n Names) tier() string     { return cmp.Or(n.Tier, "tier") }
func (n Names) cpuCores() string { return cmp.Or(n.CPUCores, "limits.cpu_cores") }

// Placement is a SandboxRequest checked and routed: its runner, the tier
// it runs on and why, its image, its limits with the defaults filled in,
// and its egress allowlist (empty: no network).
type Placement struct {
	Tenant     string
	Runner     lang.Runner
	Tier       runtime.Tier
	TierReason string
	Image      images.Image
	Limits     Limits
	Egress     []string
	System     bool
}

// Claim is what p's sandbox must be, made to spec.
func (p *Placement) Claim(spec runtime.Spec) fleet.Claim {
	return fleet.Claim{Tier: p.Tier, Spec: spec, Tenant: p.Tenant, Image: p.Image}
}

// PrepareSandbox checks r against the server's rules, fills its defaults
// and routes it. A *validate.InputError names the field to fix as r's
// caller spelled it (r.Names); a *TierPendingError (ErrTierPending) says
// that the valid request needs a tier still being installed, an
// *ImagePendingError (ErrImagePending) an image still being built.
func (e *Engine) PrepareSandbox(r SandboxRequest) (*Placement, error) {
	runner, err := e.checkSandbox(&r)
	if err != nil {
		return nil, err
	}
	p := &Placement{Tenant: r.Tenant, Runner: runner, Limits: r.Limits, System: r.System}
	if r.Network != nil {
		allow, i, err := e.cfg.Network.Narrow(r.Network.Allow)
		if err != nil {
			field := "network.allow"
			if len(r.Network.Allow) > 0 {
				field = fmt.Sprintf("network.allow[%d]", i)
			}
			return nil, validate.Refuse(field, "%v", err)
		}
		p.Egress = allow
	}
	// One instant's tiers for the whole decision: a build that ends
	// meanwhile cannot turn an auto request into an invalid one.
	ts := e.fleet.Snapshot()
	// A tier being installed counts for routing: auto waits for gVisor
	// rather than fall back to a weaker tier that is here now.
	route := router.Route(e.cfg.Routing, router.Request{Tier: r.Tier, Code: r.Code, TimeoutMS: r.TimeoutMS, Untrusted: r.Untrusted},
		runner, ts.Ready(runtime.TierGVisor) || ts.Pending(runtime.TierGVisor))
	p.Tier, p.TierReason = route.Tier, route.Reason
	ready := ts.Ready(p.Tier)
	if !ready && !ts.Pending(p.Tier) {
		return nil, validate.Refuse(r.Names.tier(), "the %s tier is not available on this server", p.Tier)
	}
	name := r.Image
	if name == "" {
		name = e.defaultImage(runner)
	}
	if p.Image, err = e.resolveImage(name); err != nil {
		if errors.Is(err, ErrImagePending) {
			return nil, err
		}
		return nil, validate.Refuse("image", "%v", err)
	}
	if !ready {
		// Last: what the caller must fix comes before what time fixes.
		return nil, &TierPendingError{Tier: p.Tier, Reason: p.TierReason}
	}
	return p, nil
}
