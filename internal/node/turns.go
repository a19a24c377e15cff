package node

import (
	"context"
	"sync"
)

// turns orders the executions of each session on this node in the order
// they were claimed, which is the order they were queued: the session
// runs one at a time, and without turns whichever execution's goroutine
// reached the session first would run first.
type turns struct {
	mu sync.Mutex
	q  map[string][]*turn // per session: the head runs, the rest wait
}

// turn is one execution's place in its session's line. A nil turn (no
// session) never waits.
type turn struct {
	t     *turns
	key   string
	ready chan struct{} // closed when this turn is the head
	once  sync.Once
}

// take queues a turn in the session's line, in claim order: dispatch
// calls it before the execution's goroutine starts.
func (t *turns) take(tenant, session string) *turn {
	if session == "" {
		return nil
	}
	k := tenant + "/" + session
	tu := &turn{t: t, key: k, ready: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.q == nil {
		t.q = map[string][]*turn{}
	}
	if len(t.q[k]) == 0 {
		close(tu.ready)
	}
	t.q[k] = append(t.q[k], tu)
	return tu
}

// wait returns once every earlier turn of the session is done, or with
// ctx's error.
func (tu *turn) wait(ctx context.Context) error {
	if tu == nil {
		return nil
	}
	select {
	case <-tu.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// done leaves the line (at once if waiting, after its run if it was the
// head) and lets the next turn go. Calling it again does nothing.
func (tu *turn) done() {
	if tu == nil {
		return
	}
	tu.once.Do(func() {
		t := tu.t
		t.mu.Lock()
		defer t.mu.Unlock()
		q := t.q[tu.key]
		for i, other := range q {
			if other != tu {
				continue
			}
			q = append(q[:i:i], q[i+1:]...)
			if len(q) == 0 {
				delete(t.q, tu.key)
				return
			}
			t.q[tu.key] = q
			if i == 0 {
				close(q[0].ready)
			}
			return
		}
	})
}
