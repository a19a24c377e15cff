package engine

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/runtime"
)

// Claim locks job's image (re-resolving it if it changed since Prepare)
// and returns what job's sandbox must be: the claim a warm pool, a session
// or the fleet lends a sandbox for (then job.Lease). release unlocks the
// image, once the execution is over.
func (e *Engine) Claim(ctx context.Context, job *Job) (_ fleet.Claim, release func(), err error) {
	release, err = e.lockImage(&job.Placement)
	if err != nil {
		return fleet.Claim{}, nil, err
	}
	spec, err := e.Spec(ctx, &job.Placement)
	if err != nil {
		release()
		return fleet.Claim{}, nil, err
	}
	return job.Placement.Claim(spec), release, nil
}

// Acquire gets job its sandbox from acq (a warm pool, a session, the
// fleet's fresh ones) for Claim(job), as job.Lease; Run releases it, and
// unlocks the image. The caller of an Acquire that fails records
// the execution with Failed.
func (e *Engine) Acquire(ctx context.Context, job *Job, acq fleet.Acquirer) error {
	claim, release, err := e.Claim(ctx, job)
	if err != nil {
		return err
	}
	lease, err := acq.Acquire(ctx, claim)
	if err != nil {
		release()
		return err
	}
	job.Lease, job.unlockImage = lease, release
	return nil
}

// Spec returns the sandbox spec p needs, language caches included.
func (e *Engine) Spec(ctx context.Context, p *Placement) (runtime.Spec, error) {
	overlays, err := e.cacheOverlay(ctx, p.Runner, p.Image)
	if err != nil {
		return runtime.Spec{}, err
	}
	l := p.Limits
	return runtime.Spec{
		Rootfs:   p.Image.Rootfs,
		Mounts:   p.Image.Mounts,
		Overlays: overlays,
		System:   p.System,
		Limits: runtime.Limits{
			MemoryBytes: l.MemoryMB << 20,
			CPUCores:    l.CPUCores,
			Pids:        l.Pids,
			DiskBytes:   l.DiskMB << 20,
		},
	}, nil
}

// WarmSpec returns the spec of a sandbox for language's executions on
// image with the server's default limits (with system, a live sandbox's):
// what a warm pool keeps ready.
func (e *Engine) WarmSpec(ctx context.Context, tier runtime.Tier, language, image string, system bool) (runtime.Spec, images.Image, error) {
	if _, ok := e.fleet.Runtime(tier); !ok {
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
	d := e.cfg.Default
	spec, err := e.Spec(ctx, &Placement{Runner: r, Image: img, Tier: tier, System: system,
		Limits: Limits{MemoryMB: d.MemoryMB, CPUCores: d.CPUCores, DiskMB: d.DiskMB, Pids: e.cfg.Pids}})
	return spec, img, err
}

// use is how an execution treats the sandbox it is lent, which what
// becomes of the sandbox after it decides (fleet.Fate): uses is the one
// place that says so.
type use struct {
	// clearTmp: /tmp is emptied before the program runs; /workspace was
	// there before the execution and stays after it.
	clearTmp bool
	// egress: the execution brings its own egress proxy. A held sandbox
	// has one for its whole life (Lease.Env points at it).
	egress bool
	// shared: other processes run beside the execution (stepRun.shared).
	shared bool
	// onlyNew: /workspace was there before the execution, so its
	// artifacts are only the files it wrote.
	onlyNew bool
}

var uses = [...]use{
	fleet.Destroyed: {egress: true},
	fleet.Pooled:    {egress: true},
	fleet.Kept:      {clearTmp: true, egress: true, onlyNew: true},
	fleet.Held:      {shared: true, onlyNew: true},
}
