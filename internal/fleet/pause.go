package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
)

// Pause saves sb with its memory to dir (runtime.Pauser) and forgets it:
// a paused sandbox is gone, its image's hold with it. A sandbox that is no
// Pauser is refused with runtime.ErrNotPausable. After any other error the
// sandbox stays registered: it runs on if it can, and is destroyed as
// usual.
func (f *Fleet) Pause(ctx context.Context, sb runtime.Sandbox, dir string) error {
	p, ok := sb.(runtime.Pauser)
	if !ok {
		return fmt.Errorf("pause sandbox %s: %w", sb.ID(), runtime.ErrNotPausable)
	}
	if err := p.Pause(ctx, dir); err != nil {
		return err
	}
	if e := f.take(sb); e != nil {
		e.unlockImage()
	}
	return nil
}

// Restore starts a sandbox of tier from the state a Pause saved in dir
// (runtime.Restorer), holding img for as long as it lives, and registers
// it as holder's. spec must be the paused sandbox's.
func (f *Fleet) Restore(ctx context.Context, tier runtime.Tier, spec runtime.Spec, img images.Image, dir, holder string) (runtime.Sandbox, error) {
	rt, ok := f.Runtime(tier)
	if !ok {
		return nil, fmt.Errorf("no %s runtime", tier)
	}
	r, ok := rt.(runtime.Restorer)
	if !ok {
		return nil, fmt.Errorf("%w: the %s runtime restores no saved sandbox", runtime.ErrUnavailable, tier)
	}
	unlockImage := func() {}
	if f.images != nil && img.Digest != "" {
		u, err := f.images.Lock(img)
		if err != nil {
			return nil, fmt.Errorf("lock image %s: %w", img.Name, err)
		}
		unlockImage = u
	}
	sb, err := r.Restore(ctx, spec, dir)
	if err != nil {
		unlockImage()
		return nil, fmt.Errorf("restore sandbox: %w", err)
	}
	f.mu.Lock()
	f.live[sb.ID()] = &entry{sb: sb, unlockImage: unlockImage, created: time.Now(), holder: holder}
	f.mu.Unlock()
	return sb, nil
}
