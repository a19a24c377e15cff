package engine

import (
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/fault"
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

// ImageBuilder is an ImageResolver that knows which images are being
// built: a request for one that is not there yet waits for the build
// (ErrImagePending) instead of being refused.
type ImageBuilder interface {
	// Building reports whether a build or import of name is in progress.
	Building(name string) bool
}

// ErrImagePending matches an *ImagePendingError: the image a request
// names is being built on this machine, so the same request may succeed
// later.
var ErrImagePending = errors.New("image still being built")

// ImagePendingError is PrepareSandbox's answer for a request whose image
// is not here yet but is being built (make run builds the python image in
// the background).
type ImagePendingError struct{ Image string }

func (e *ImagePendingError) Error() string {
	return fmt.Sprintf("image %q is still being built on this machine; retry in a few minutes", e.Image)
}

// Is makes errors.Is(err, ErrImagePending) true.
func (e *ImagePendingError) Is(target error) bool { return target == ErrImagePending }

// Fault is e for a caller: unavailable (image_pending) for now, retried
// after the same delay as a tier being installed: a build takes minutes.
func (e *ImagePendingError) Fault() *fault.Error {
	return &fault.Error{Kind: fault.Unavailable, Code: "image_pending", RetryAfter: tierRetryAfter, Err: e,
		Message: fmt.Sprintf("image %q is still being built on this server (corral image build %s); retry after the delay in Retry-After",
			e.Image, e.Image)}
}

// resolveImage resolves name, or says that it is being built.
func (e *Engine) resolveImage(name string) (images.Image, error) {
	img, err := e.images.Resolve(name)
	if err != nil && errors.Is(err, images.ErrNotFound) {
		if b, ok := e.images.(ImageBuilder); ok && b.Building(name) {
			return img, &ImagePendingError{Image: name}
		}
	}
	return img, err
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
	_ ImageBuilder     = (*images.Store)(nil)
	_ lang.ModuleIndex = (*images.Store)(nil)
)
