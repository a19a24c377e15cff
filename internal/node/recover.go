package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// recover puts the node's shared state back in order after a restart:
// executions this node was running died with the previous process, and
// with in-process state the queue died too.
func (n *Node) recover(ctx context.Context) error {
	lives, err := n.state.ListLive(ctx)
	if err != nil {
		return fmt.Errorf("list live executions: %w", err)
	}
	for _, l := range lives {
		if l.Node == n.cfg.ID {
			n.declareLost(ctx, l, "the node restarted while running it")
		}
	}
	// Records that say running on this node but have no live entry (the
	// state was in-process, or the entry expired).
	running, err := n.store.ExecutionsInStatus(ctx, sandbox.StatusRunning, time.Now(), 10000)
	if err != nil {
		return fmt.Errorf("list running executions: %w", err)
	}
	for _, ex := range running {
		if ex.Node != n.cfg.ID {
			continue
		}
		if _, err := n.state.GetLive(ctx, key(ex.Tenant, ex.ID)); errors.Is(err, state.ErrNotFound) {
			n.markLost(ctx, ex, "the node restarted while running it")
		}
	}
	if !n.cfg.LocalState {
		return nil
	}
	queued, err := n.store.ExecutionsInStatus(ctx, sandbox.StatusQueued, time.Now(), 100000)
	if err != nil {
		return fmt.Errorf("list queued executions: %w", err)
	}
	for _, ex := range queued {
		if err := n.state.Enqueue(ctx, key(ex.Tenant, ex.ID), 0); err != nil {
			return fmt.Errorf("requeue %s: %w", ex.ID, err)
		}
	}
	if len(queued) > 0 {
		n.log.Info("requeued executions after restart", "count", len(queued))
	}
	return nil
}

// reapOrphans turns executions whose node stopped heartbeating into
// retryable internal errors. Every node runs it; the conditional update
// makes exactly one of them win.
func (n *Node) reapOrphans(ctx context.Context) {
	lives, err := n.state.ListLive(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("list live executions", "err", err)
		}
		return
	}
	now := time.Now()
	for _, l := range lives {
		if l.Status != sandbox.StatusRunning || now.Sub(l.Heartbeat) < n.cfg.OrphanAfter {
			continue
		}
		n.declareLost(ctx, l, fmt.Sprintf("node %s lost: no heartbeat for %s", l.Node, now.Sub(l.Heartbeat).Round(time.Second)))
	}
}

func (n *Node) declareLost(ctx context.Context, l state.Live, why string) {
	tenant, id := splitKey(l.ID)
	ex, err := n.store.GetExecution(ctx, tenant, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			_ = n.state.DeleteLive(ctx, l.ID)
		}
		return
	}
	n.markLost(ctx, ex, why)
}

func (n *Node) markLost(ctx context.Context, ex *store.Execution, why string) {
	rec := ex.Record
	rec.Status = sandbox.StatusFailed
	rec.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: " + why + "; retry", Retryable: true}
	rec.FinishedAt = time.Now().UTC()
	err := n.finish(ctx, ex, rec, sandbox.StatusRunning)
	switch {
	case err == nil:
		n.metrics.Orphans.Inc()
		n.log.Warn("execution orphaned", "execution_id", ex.ID, "tenant", ex.Tenant, "node", ex.Node, "why", why)
	case errors.Is(err, store.ErrStale):
		_ = n.state.DeleteLive(ctx, key(ex.Tenant, ex.ID)) // it finished after all
	default:
		n.log.Error("record orphaned execution", "execution_id", ex.ID, "err", err)
	}
}

// sweep destroys sandboxes of this node that no running execution owns, and
// those of executions running past twice their timeout (the engine's own
// deadline should have ended them: something is stuck).
func (n *Node) sweep(ctx context.Context) {
	keep := map[string]bool{}
	n.mu.Lock()
	for _, r := range n.running {
		if r.sandboxID != "" && time.Since(r.started) <= 2*r.timeout+n.engine.Config().CompileTimeout {
			keep[r.sandboxID] = true
		}
	}
	n.mu.Unlock()
	// A minute's grace: a sandbox being created is not yet known to its run.
	held := func(id string) bool { return keep[id] || (n.sessions != nil && n.sessions.Holds(id)) }
	if swept := n.engine.Sweep(ctx, time.Minute, held); swept > 0 {
		n.metrics.SweptSandbox.Add(float64(swept))
		n.log.Warn("swept stray sandboxes", "count", swept)
	}
}
