package kernel

import (
	"context"
	"errors"
	"fmt"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/sandbox"
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
			if kc.cur == nil { // lost with an earlier restore
				kc.mu.Unlock()
				continue
			}
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

// Saved describes a Contexts whose sandbox was saved with its memory, for
// a node process that did not pause it (this node started again, or
// another one) to take the contexts up again (Restore). It holds what the
// host keeps and the saved memory does not: each context's id, language,
// working directory and environment (for a restart), and the agent's
// request ids of its process and of the root zygotes. A context's state,
// its execution count among it, lives in its process, which the memory
// keeps. It is JSON, part of the description live saves with the
// sandbox's memory.
type Saved struct {
	// Roots are the root zygotes' agent ids, by language.
	Roots map[string]uint32 `json:"roots,omitempty"`
	// Contexts are oldest first.
	Contexts []SavedContext `json:"contexts,omitempty"`
	// Cells is the highest cell number the saving process gave: the
	// restoring one numbers its cells above it, so that nothing a runner
	// still holds of an old cell is taken for a new one's.
	Cells uint64 `json:"cells,omitempty"`
}

// SavedContext is one context of a Saved.
type SavedContext struct {
	ID       string   `json:"id"`
	Language string   `json:"language"`
	Cwd      string   `json:"cwd"`
	Env      []string `json:"env"`
	Label    string   `json:"label,omitempty"`
	// Process is the agent's id of the context's process; 0 when it had
	// none (lost with an earlier restore).
	Process uint32 `json:"process,omitempty"`
}

// Save describes the contexts for Restore. It is meant for a Contexts held
// by Suspend (no cell runs, none is created), whose sandbox was saved.
func (k *Contexts) Save() Saved {
	k.rootMu.Lock()
	defer k.rootMu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	s := Saved{Cells: cellIDs.Load()}
	for language, p := range k.roots {
		if s.Roots == nil {
			s.Roots = map[string]uint32{}
		}
		s.Roots[language] = p.ID()
	}
	for _, id := range k.order {
		kc := k.contexts[id]
		kc.mu.Lock()
		sc := SavedContext{ID: kc.info.ID, Language: kc.info.Language, Cwd: kc.info.Cwd, Env: kc.env, Label: kc.label}
		if kc.cur != nil {
			sc.Process = kc.cur.proc.ID()
		}
		kc.mu.Unlock()
		s.Contexts = append(s.Contexts, sc)
	}
	return s
}

// Restore returns the contexts s describes, going on in the sandbox
// restored from their pause, whose agent is c (a resumed client): each
// context's process and each root zygote is attached by its id, as Resume
// does. A context whose process c does not run is kept with its process
// lost: its next cell starts a fresh one and says so (ContextRestarted);
// a missing root starts again when next needed. A context of a language
// this server has no contexts for is dropped, and the error names it. It
// returns how many contexts went on with their process.
func Restore(c *agent.Client, o Options, s Saved) (*Contexts, int, error) {
	k := New(c, o)
	for { // cells are numbered above the saving process's
		n := cellIDs.Load()
		if n >= s.Cells || cellIDs.CompareAndSwap(n, s.Cells) {
			break
		}
	}
	for language, id := range s.Roots {
		if p, err := c.Attach(id, nil); err == nil {
			k.roots[language] = p
		}
	}
	kept := 0
	var errs []error
	for _, sc := range s.Contexts {
		cr, err := contexter(sc.Language)
		if err != nil {
			errs = append(errs, fmt.Errorf("context %s: %w", sc.ID, err))
			continue
		}
		kc := &codeContext{info: sandbox.CodeContext{ID: sc.ID, Language: sc.Language, Cwd: sc.Cwd}, cr: cr,
			env: sc.Env, label: sc.Label, turn: make(chan struct{}, 1)}
		if sc.Process != 0 {
			out := &output{}
			if p, err := c.Attach(sc.Process, out); err == nil {
				kc.cur = &instance{proc: p, out: out}
				kept++
			}
		}
		k.contexts[sc.ID] = kc
		k.order = append(k.order, sc.ID)
	}
	if err := errors.Join(errs...); err != nil {
		return k, kept, fmt.Errorf("restore contexts: %w", err)
	}
	return k, kept, nil
}
