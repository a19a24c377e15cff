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
	release, err = e.lockImage(job)
	if err != nil {
		return fleet.Claim{}, nil, err
	}
	spec, err := e.Spec(ctx, job)
	if err != nil {
		release()
		return fleet.Claim{}, nil, err
	}
	return fleet.Claim{Tier: job.Tier, Spec: spec, Tenant: job.Tenant, Image: job.Image}, release, nil
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

// WarmSpec returns the spec of a sandbox for language's executions on
// image with the server's default limits: what a warm pool keeps ready.
func (e *Engine) WarmSpec(ctx context.Context, tier runtime.Tier, language, image string) (runtime.Spec, images.Image, error) {
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
	job := &Job{Runner: r, Image: img, Tier: tier}
	job.Req.Limits = e.cfg.Default
	spec, err := e.Spec(ctx, job)
	return spec, img, err
}
