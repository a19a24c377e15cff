package kernel

import (
	"context"
	"fmt"

	"github.com/corralhq/corral/internal/agent"
)

// A live sandbox paused with its memory (gVisor) keeps its contexts'
// processes: Suspend waits for the cells that run and holds every context
// while the sandbox is saved; Resume takes the processes up again through
// the restored sandbox's agent, by their ids, and lets the queued runs go.

// client returns the agent the contexts run on now.
func (k *Contexts) client() *agent.Client {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.c
}

// Suspend waits for every context's running cell (and fork) to end, as
// long as ctx allows, and then holds every context: runs and forks queue
// until Resume (or fail with ErrNotFound after Close). On error nothing is
// held. Contexts created after Suspend began are not held: the caller
// stops creating them first.
func (k *Contexts) Suspend(ctx context.Context) error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return ErrClosed
	}
	if k.held != nil {
		k.mu.Unlock()
		return nil
	}
	cs := make([]*codeContext, 0, len(k.order))
	for _, id := range k.order {
		cs = append(cs, k.contexts[id])
	}
	k.mu.Unlock()
	taken := make([]*codeContext, 0, len(cs))
	for _, c := range cs {
		if err := c.take(ctx); err != nil {
			for _, t := range taken {
				t.release()
			}
			return fmt.Errorf("wait for the contexts' running cells: %w", err)
		}
		taken = append(taken, c)
	}
	k.mu.Lock()
	k.held = taken
	k.mu.Unlock()
	return nil
}

// Resume ends a Suspend. With c set, the contexts go on in the sandbox
// restored from the pause, whose agent is c (a resumed client): each
// context's process and each root zygote is attached by its id. A process
// the restored agent does not run keeps its lost handle: the context's next
// cell restarts it (its state is lost, and the cell is told), a missing root
// starts again when next needed. With c nil the pause did not happen and
// the contexts go on as they were. It returns how many contexts went on
// with their process.
func (k *Contexts) Resume(c *agent.Client) int {
	k.rootMu.Lock() // roots change under both
	defer k.rootMu.Unlock()
	k.mu.Lock()
	held := k.held
	k.held = nil
	kept := 0
	if c != nil && !k.closed {
		k.c = c
		for language, p := range k.roots {
			np, err := c.Attach(p.ID(), nil)
			if err != nil {
				delete(k.roots, language)
				continue
			}
			k.roots[language] = np
		}
		for _, kc := range k.contexts {
			kc.mu.Lock()
			if np, err := c.Attach(kc.cur.proc.ID(), kc.cur.out); err == nil {
				kc.cur = &instance{proc: np, out: kc.cur.out}
				kept++
			}
			kc.mu.Unlock()
		}
	} else if !k.closed {
		kept = len(k.contexts)
	}
	k.mu.Unlock()
	for _, kc := range held {
		kc.release()
	}
	return kept
}
