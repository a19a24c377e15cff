package pool

import "github.com/corralhq/corral/internal/runtime"

// IdleSandboxes returns the ready sandboxes of the pool's first class that
// tenant used ("": the fresh ones).
func (p *Pool) IdleSandboxes(tenant string) []runtime.Sandbox {
	c := p.classes[0]
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
