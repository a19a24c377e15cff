package session

import (
	"context"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/kernel"
)

// Code contexts (internal/kernel) live in a live sandbox's held sandbox:
// one kernel.Kernels per sandbox, made with it and closed when it is torn
// down or made again. A sandbox made again has lost its contexts: calls
// for them fail with kernel.ErrNotFound.

// closeWait bounds the wait for a torn-down sandbox's contexts to end.
const closeWait = 5 * time.Second

// kernels returns the contexts of tenant's live sandbox id, making its
// sandbox (again) if it has none.
func (m *Manager) kernels(ctx context.Context, tenant, id string) (*kernel.Kernels, error) {
	e, err := m.liveEntry(tenant, id)
	if err != nil {
		return nil, err
	}
	sb, err := m.held(ctx, e)
	if err != nil {
		return nil, err
	}
	ls := e.live
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.sb != sb || ls.kernels == nil {
		return nil, fmt.Errorf("%w: the sandbox ended", ErrNotFound)
	}
	return ls.kernels, nil
}

// closeKernelsLocked ends the contexts of a sandbox being torn down
// (ls.mu is held).
func (m *Manager) closeKernelsLocked(ls *liveState) {
	if ls.kernels == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	if err := ls.kernels.Close(ctx); err != nil {
		m.log.Debug("close a torn-down sandbox's contexts", "err", err)
	}
	ls.kernels = nil
}

// CreateContext makes a code context in tenant's live sandbox id.
func (m *Manager) CreateContext(ctx context.Context, tenant, id string, o kernel.ContextOptions) (kernel.Info, error) {
	k, err := m.kernels(ctx, tenant, id)
	if err != nil {
		return kernel.Info{}, err
	}
	return k.Create(ctx, o)
}

// Contexts lists the code contexts of tenant's live sandbox id, oldest
// first.
func (m *Manager) Contexts(ctx context.Context, tenant, id string) ([]kernel.Info, error) {
	k, err := m.kernels(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	return k.List(), nil
}

// RunContext runs code as the next cell of context cid (kernel.Kernels.Run).
func (m *Manager) RunContext(ctx context.Context, tenant, id, cid, code string, timeout time.Duration, emit func(kernel.Event)) error {
	k, err := m.kernels(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Run(ctx, cid, code, timeout, emit)
}

// DeleteContext ends context cid.
func (m *Manager) DeleteContext(ctx context.Context, tenant, id, cid string) error {
	k, err := m.kernels(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Delete(ctx, cid)
}

// RestartContext gives context cid a fresh process; its state is lost.
func (m *Manager) RestartContext(ctx context.Context, tenant, id, cid string) error {
	k, err := m.kernels(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Restart(ctx, cid)
}

// ForkContext makes a new context holding a copy of context cid's state.
func (m *Manager) ForkContext(ctx context.Context, tenant, id, cid string) (kernel.Info, error) {
	k, err := m.kernels(ctx, tenant, id)
	if err != nil {
		return kernel.Info{}, err
	}
	return k.Fork(ctx, cid)
}

// InterruptContext interrupts context cid's running cell.
func (m *Manager) InterruptContext(ctx context.Context, tenant, id, cid string) error {
	k, err := m.kernels(ctx, tenant, id)
	if err != nil {
		return err
	}
	return k.Interrupt(ctx, cid)
}
