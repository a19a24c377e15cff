package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// recover puts the store back in order after a restart: executions this
// node was running died with the previous process. What was queued is
// still queued (the store is the queue) and is claimed as usual.
func (n *Node) recover(ctx context.Context) error {
	es, err := n.store.NodeExecutions(ctx, n.id())
	if err != nil {
		return fmt.Errorf("executions of this node: %w", err)
	}
	for _, ex := range es {
		if ex.Record.Status == sandbox.StatusRunning {
			n.markLost(ctx, ex, "the node restarted while running it")
		}
	}
	return nil
}

// check compares what this node runs with the store: a run whose record
// is no longer running here (another node declared this node lost) is
// abandoned, and one a client asked to cancel is cancelled even if the
// signal never came.
func (n *Node) check(ctx context.Context) {
	n.mu.Lock()
	local := len(n.running)
	n.mu.Unlock()
	if queued, err := n.store.CountQueued(ctx); err == nil {
		n.metrics.Queued.Set(float64(queued))
	}
	if local == 0 {
		return
	}
	read := time.Now()
	es, err := n.store.NodeExecutions(ctx, n.id())
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("check running executions", "err", err)
		}
		return
	}
	stored := map[string]*store.Execution{}
	for _, ex := range es {
		if ex.Record.Status == sandbox.StatusRunning {
			stored[key(ex.Tenant, ex.ID)] = ex
		}
	}
	n.mu.Lock()
	var lost, cancelled []*run
	for k, r := range n.running {
		switch ex, ok := stored[k]; {
		case r.started.After(read):
			// Claimed after the read: the read cannot know it.
		case !ok:
			// Registered runs are running in the store from their claim
			// until their record: one missing was ended by someone else.
			lost = append(lost, r)
		case ex.Cancel:
			cancelled = append(cancelled, r)
		}
	}
	n.mu.Unlock()
	for _, r := range lost {
		r.cancel(errLost)
	}
	for _, r := range cancelled {
		r.cancel(errCancelled)
	}
}

// reapLost fails the executions of nodes that stopped announcing
// themselves: running ones as retryable internal errors, queued ones that
// waited for a lost node's session as lost. Every node runs it; the
// conditional updates make exactly one of them win each record.
func (n *Node) reapLost(ctx context.Context) {
	lost, err := n.cluster.Lost(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("look for lost nodes", "err", err)
		}
		return
	}
	for _, node := range lost {
		es, err := n.store.NodeExecutions(ctx, node.ID)
		if err != nil {
			n.log.Warn("executions of a lost node", "node", node.ID, "err", err)
			continue
		}
		silent := time.Since(node.SeenAt).Round(time.Second)
		for _, ex := range es {
			if ex.Record.Status == sandbox.StatusRunning {
				n.markLost(ctx, ex, fmt.Sprintf("node %s lost: no heartbeat for %s", node.ID, silent))
			} else {
				n.sessionLost(ctx, ex, node.ID)
			}
		}
		if len(es) == 0 {
			// Nothing of it is left to reap; its sessions stay lost.
			if err := n.store.ForgetNode(ctx, node.ID, node.SeenAt.Add(time.Microsecond)); err != nil {
				n.log.Warn("forget a lost node", "node", node.ID, "err", err)
			}
		}
	}
}

func (n *Node) markLost(ctx context.Context, ex *store.Execution, why string) {
	rec := ex.Record
	rec.Status = sandbox.StatusFailed
	rec.Error = &sandbox.Failure{Type: sandbox.ErrInternal, Message: "internal error: " + why + "; retry", Retryable: true}
	rec.FinishedAt = time.Now().UTC()
	switch err := n.finish(ctx, ex, rec, sandbox.StatusRunning); {
	case err == nil:
		n.metrics.Orphans.Inc()
		n.log.Warn("execution lost", "execution_id", ex.ID, "tenant", ex.Tenant, "ran_on", ex.Node, "why", why)
	case errors.Is(err, store.ErrStale):
		// It finished after all.
	default:
		n.log.Error("record lost execution", "execution_id", ex.ID, "err", err)
	}
}

// sessionLost fails a queued execution whose session was lost with its
// node: nothing can run it.
func (n *Node) sessionLost(ctx context.Context, ex *store.Execution, node string) {
	rec := ex.Record
	rec.Status = sandbox.StatusFailed
	rec.Error = &sandbox.Failure{Type: sandbox.ErrInternal,
		Message: fmt.Sprintf("session %s was lost with node %s before this execution ran; create a new session and send it again", rec.SessionID, node)}
	rec.FinishedAt = time.Now().UTC()
	if err := n.finish(ctx, ex, rec, sandbox.StatusQueued); err != nil && !errors.Is(err, store.ErrStale) {
		n.log.Error("record execution of a lost session", "execution_id", ex.ID, "err", err)
	}
}

// sweep destroys sandboxes whose holder kept them past the time it said
// it would let go (an execution stuck past twice its limits: the engine's
// own deadline should have ended it).
func (n *Node) sweep(ctx context.Context) {
	if swept := n.fleet.Sweep(ctx, time.Now()); swept > 0 {
		n.metrics.SweptSandbox.Add(float64(swept))
		n.log.Warn("swept stuck sandboxes", "count", swept)
	}
}
