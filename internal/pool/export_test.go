package pool

import (
	"context"
	"log/slog"
	"time"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/runtime"
)

// IdleSandboxes returns the ready sandboxes of the pool's first class that
// tenant used ("": the fresh ones).
func (p *Pool) IdleSandboxes(tenant string) []runtime.Sandbox {
	c := p.all()[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []runtime.Sandbox
	for _, mb := range c.idle {
		if mb.owner == tenant {
			out = append(out, mb.sb)
		}
	}
	return out
}

// NewAt is New with the clock that ages idle sandboxes and misses.
func NewAt(ctx context.Context, fl *fleet.Fleet, e Interpreters, cfg Config, m *metrics.Metrics, log *slog.Logger, now func() time.Time) (*Pool, []error) {
	return newPool(ctx, fl, e, cfg, m, log, now)
}

// Expire does now what the refill does every second: destroys the first
// class's sandboxes idle for too long and lets its target follow demand
// down.
func (p *Pool) Expire() { p.expire(p.all()[0]) }
