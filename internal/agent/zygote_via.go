//go:build linux

package agent

import (
	"fmt"
	"os"
	"time"
)

// A zygote started through another zygote (StartRequest with both Zygote
// and Via): the parent zygote forks a child that is a zygote itself and
// answers on a control socket of its own. Code contexts (internal/kernel)
// are made this way: the first context of a language is forked from a root
// zygote with the context runner loaded, and a fork of a context is forked
// from the context, which keeps its state.
//
// The request to the parent carries "zygote": true and, after the child's
// stdin, stdout, stderr and (with StatusFD) status fd, the child's end of a
// new control socket as the last fd. The parent answers {"id", "pid"} as for
// any child; the child then says {"ready": ...} on its own socket, and the
// agent answers the start request with it. Unlike other zygotes, such a
// child may have a status fd (StatusFD): a context reports its events there.
// Spares are never used for it: a spare is a program's child, prepared for
// one program.

// startZygoteVia starts req (Zygote and Via set) as a child of the zygote
// req.Via. The answer comes later (returns 0), once the child is ready.
func (a *Agent) startZygoteVia(id uint32, req StartRequest) (int, error) {
	z := a.zygote(req.Via)
	if z == nil {
		return 0, refuse(KindZygote, "start: no zygote %d", req.Via)
	}
	user, err := a.viaUser(z, req.User)
	if err != nil {
		return 0, err
	}
	req.Env = userEnv(req.Env, user)
	req.Dir = a.hostPath(req.Dir)
	req.Argv, req.Env = a.hostArgs(req.Argv, req.Env)
	p := &proc{id: id, persistent: true, exited: make(chan struct{})}
	io, err := a.stdio(p, req.Stdin, req.StatusFD)
	if err != nil {
		return 0, err
	}
	defer io.closeChild()
	zs, zc, err := socketpair()
	if err != nil {
		io.closeParent(p)
		return 0, err
	}
	defer zc.Close()
	fds := append(append([]*os.File(nil), io.child...), zc)
	m := zygoteMsg{ID: id, Argv: req.Argv, Env: req.Env, Dir: req.Dir, StatusFD: req.StatusFD, Zygote: true}
	ch, err := z.send(id, m, fds)
	if err != nil {
		io.closeParent(p)
		zs.Close()
		return 0, fmt.Errorf("start: %w", err)
	}
	// Before waiting: the child's exit must reach EOF on every stream.
	io.closeChild()
	zc.Close()
	go a.adoptZygoteVia(z, p, io, zs, ch, user)
	return 0, nil
}

// adoptZygoteVia waits for the parent zygote to report the child it forked
// for p, registers the child as a process and as a zygote whose control
// socket is zs, and answers the start request once it is ready.
func (a *Agent) adoptZygoteVia(parent *zygote, p *proc, io *procIO, zs *os.File, ch <-chan zygoteMsg, user identity) {
	pid, err := forked(parent, p.id, ch)
	if err != nil {
		io.closeParent(p)
		zs.Close()
		a.fail(p.id, err)
		return
	}
	a.adopt(p, io, pid)
	a.awaitReady(a.newZygote(p.id, p, zs, user))
}

// forked waits for a zygote's answer to the fork request id: the child's
// pid, or why there is none.
func forked(z *zygote, id uint32, ch <-chan zygoteMsg) (int, error) {
	t := time.NewTimer(zygoteTimeout)
	defer t.Stop()
	select {
	case m := <-ch:
		if m.Error != "" {
			return 0, refuse(KindZygote, "start: zygote: %s", m.Error)
		}
		if m.PID <= 1 {
			return 0, refuse(KindZygote, "start: zygote reported pid %d", m.PID)
		}
		return m.PID, nil
	case <-z.dead:
		z.forget(id)
		return 0, refuse(KindZygote, "start: the zygote is gone")
	case <-t.C:
		z.forget(id)
		return 0, refuse(KindZygote, "start: the zygote does not answer")
	}
}
