package live

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/kernel"
)

// Code contexts (internal/kernel) live in a live sandbox's running
// sandbox: one set per sandbox, made with it and closed when it is torn
// down or made again. A sandbox made again has lost its contexts: calls
// for them fail with kernel.ErrNotFound.

// closeWait bounds the wait for a torn-down sandbox's contexts to end.
const closeWait = 5 * time.Second

// Contexts returns the sandbox's code contexts, making its running
// sandbox (again) if it has none.
func (s *Sandbox) Contexts(ctx context.Context) (*kernel.Contexts, error) {
	sb, err := s.held(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sb != sb || s.contexts == nil {
		return nil, fmt.Errorf("%w: the sandbox ended", ErrNotFound)
	}
	return s.contexts, nil
}

// closeContextsLocked ends the contexts of a sandbox being torn down (s.mu
// is held).
func (s *Sandbox) closeContextsLocked() {
	if s.contexts == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	if err := s.contexts.Close(ctx); err != nil {
		s.m.log.Debug("close a torn-down sandbox's contexts", "err", err)
	}
	s.contexts = nil
}
