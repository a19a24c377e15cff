package audit

import (
	"context"
	"log/slog"
	"time"
)

// Pruner deletes a tenant's events older than a time (store.Store is one).
type Pruner interface {
	// PruneAudit deletes tenant's events stored before before, and
	// remembers the last number deleted (Head.Pruned); it returns how
	// many it deleted.
	PruneAudit(ctx context.Context, tenant string, before time.Time) (int64, error)
}

// Retention is how long each tenant's events are kept: Tenants[name], or
// Default for a tenant not listed; 0 keeps them for ever.
type Retention struct {
	Default time.Duration
	Tenants map[string]time.Duration
}

// For returns tenant's retention.
func (r Retention) For(tenant string) time.Duration {
	if d, ok := r.Tenants[tenant]; ok {
		return d
	}
	return r.Default
}

// Prune applies r once to each of tenants at now, logging what fails.
func Prune(ctx context.Context, p Pruner, r Retention, tenants []string, now time.Time, log *slog.Logger) {
	for _, t := range tenants {
		d := r.For(t)
		if d <= 0 {
			continue
		}
		n, err := p.PruneAudit(ctx, t, now.Add(-d))
		if err != nil {
			log.Warn("audit retention", "tenant", t, "err", err)
			continue
		}
		if n > 0 {
			log.Info("audit retention", "tenant", t, "deleted", n, "older_than", d.String())
		}
	}
}

// RunRetention prunes every interval until ctx ends.
func RunRetention(ctx context.Context, p Pruner, r Retention, tenants []string, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		Prune(ctx, p, r, tenants, time.Now(), log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
