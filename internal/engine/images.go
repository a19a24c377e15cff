package engine

import (
	"errors"

	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
)

// ImageLocker is an ImageResolver that evicts images to make room, and
// must know which ones sandboxes run on.
type ImageLocker interface {
	// Lock marks img in use until unlock is called; it fails if the
	// image was removed after it was resolved.
	Lock(img images.Image) (unlock func(), err error)
}

// ImageDefaulter is an ImageResolver with a default image per language.
type ImageDefaulter interface {
	// DefaultImage names the image for a language's executions that name
	// none.
	DefaultImage(language string) string
}

// defaultImage is the image for a request that names none.
func (e *Engine) defaultImage(r lang.Runner) string {
	if d, ok := e.images.(ImageDefaulter); ok {
		return d.DefaultImage(r.Name())
	}
	return images.HostName
}

// lockImage marks p's image in use until the returned func is called, so
// no build or import evicts it while the execution needs it. An image
// rebuilt or re-imported since Prepare is run as the name now stands:
// p.Image says so.
func (e *Engine) lockImage(p *Placement) (func(), error) {
	h, ok := e.images.(ImageLocker)
	if !ok {
		return func() {}, nil
	}
	release, err := h.Lock(p.Image)
	if errors.Is(err, images.ErrNotFound) {
		if img, rerr := e.images.Resolve(p.Image.Name); rerr == nil && img.Digest != p.Image.Digest {
			if release, err = h.Lock(img); err == nil {
				p.Image = img
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return release, nil
}

// explain is how a failed run's message is found in its stderr, naming the
// images that have a module the program could not import.
func (e *Engine) explain(job *Job) func(stderr string) string {
	idx, _ := e.images.(lang.ModuleIndex)
	return lang.Explain(job.Runner, job.Image.Name, idx)
}

var (
	_ ImageResolver    = (*images.Store)(nil)
	_ ImageLocker      = (*images.Store)(nil)
	_ ImageDefaulter   = (*images.Store)(nil)
	_ lang.ModuleIndex = (*images.Store)(nil)
)
