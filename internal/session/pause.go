package session

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

// Pausing a live sandbox. Its files always survive: its disk stays in the
// session's directory. A sandbox that can be saved with its memory
// (runtime.Pauser: gVisor's, through runsc checkpoint) is saved to the
// session's directory as well, and Resume restores it: its processes run
// on, with the same pids, process table and output buffers on this node,
// and its code contexts keep their variables (kernel.Kernels.Suspend and
// Resume). Any other (runc's: no CRIU here) is torn down; Resume makes a
// new sandbox on the same disk, and its processes and contexts are lost,
// which the resume's answer says.
//
// While paused, every call that needs the sandbox (processes started,
// stdin, signals, files, contexts, executions with its session id) fails
// with ErrPaused: resuming costs a restore, which the client asks for
// (Resume). What this node holds of it (its description, its process list
// and their buffered output) stays readable. Its timeout stops while it is
// paused; a paused sandbox is kept for Config.PausedTTL, and a resume gives
// it its whole timeout again.

// Pause errors.
var (
	// ErrPaused: the sandbox is paused (a call that needs it running, or
	// a second pause).
	ErrPaused = errors.New("sandbox paused")
	// ErrNotPaused: a resume of a sandbox that is not paused.
	ErrNotPaused = errors.New("sandbox not paused")
)

// DefaultPausedTTL is how long a paused sandbox is kept when
// Config.PausedTTL is zero.
const DefaultPausedTTL = 7 * 24 * time.Hour

// exitPaused is the exit error of a process that ended with its sandbox's
// pause (one whose memory could not be saved).
const exitPaused = "sandbox_paused"

func (m *Manager) pausedTTL() time.Duration {
	if m.cfg.PausedTTL > 0 {
		return m.cfg.PausedTTL
	}
	return DefaultPausedTTL
}

// pauseDir is where a live sandbox's memory is saved.
func pauseDir(e *entry) string { return filepath.Join(e.dir, "paused") }

// pausable returns tenant's live sandbox id with its lock taken: a running
// execution of it ends first.
func (m *Manager) pausable(ctx context.Context, tenant, id string) (*entry, error) {
	if _, err := m.liveEntry(tenant, id); err != nil {
		return nil, err
	}
	e, err := m.lookup(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	expired := m.now().After(e.info.ExpiresAt)
	m.mu.Unlock()
	if e.live == nil || expired {
		<-e.lock
		return nil, ErrNotFound
	}
	return e, nil
}

// Pause pauses tenant's live sandbox id: with its memory where its runtime
// can save it, else with its files only. Running cells of its contexts
// and a running execution end first (ctx bounds the wait). Pausing a
// paused sandbox is ErrPaused.
func (m *Manager) Pause(ctx context.Context, tenant, id string) error {
	e, err := m.pausable(ctx, tenant, id)
	if err != nil {
		return err
	}
	defer func() { <-e.lock }()
	ls := e.live
	ls.mu.Lock()
	defer ls.mu.Unlock()
	m.mu.Lock()
	paused := e.spec.Paused != nil
	m.mu.Unlock()
	if paused {
		return ErrPaused
	}
	start := time.Now()
	p := &sandbox.SandboxPause{}
	if ls.sb != nil && alive(ls.sb) {
		if _, ok := ls.sb.(runtime.Pauser); ok {
			size, err := m.pauseMemoryLocked(ctx, e)
			switch {
			case err == nil:
				p.Memory, p.ImageBytes = true, size
			case errors.Is(err, runtime.ErrNotPausable):
				m.log.Warn("a sandbox cannot be saved with its memory; pausing it with its files only", "session", e.key, "err", err)
			default:
				return err
			}
		}
	}
	if !p.Memory {
		ls.pauseLost = m.dropPausedLocked(ls)
	}
	m.mu.Lock()
	now := m.now().UTC()
	p.PausedAt, p.DurationMS = now, time.Since(start).Milliseconds()
	e.spec.Paused = p
	e.info.ExpiresAt = now.Add(m.pausedTTL())
	err = m.saveLocked(e)
	info := m.describeLocked(e)
	m.mu.Unlock()
	m.publish(ctx, e, info)
	if err != nil {
		return fmt.Errorf("pause %s: paused, but its state was not saved (a restart of this node makes it again with its files): %w", e.key, err)
	}
	m.log.Info("sandbox paused", "session", e.key, "memory", p.Memory, "image_bytes", p.ImageBytes, "duration_ms", p.DurationMS)
	return nil
}

// pauseMemoryLocked saves the sandbox with its memory (ls.mu is held) and
// returns the saved state's size. On error the sandbox runs on as it was.
func (m *Manager) pauseMemoryLocked(ctx context.Context, e *entry) (int64, error) {
	ls := e.live
	dir := pauseDir(e)
	// What an earlier pause left (its state saved, its session not) goes.
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("pause %s: %w", e.key, err)
	}
	if ls.kernels != nil {
		if err := ls.kernels.Suspend(ctx); err != nil {
			return 0, fmt.Errorf("pause %s: %w", e.key, err)
		}
	}
	moving := markMovingLocked(ls)
	if err := m.fleet.Pause(ctx, ls.sb, dir); err != nil {
		settle(moving, nil, false)
		if ls.kernels != nil {
			ls.kernels.Resume(nil)
		}
		return 0, fmt.Errorf("pause %s: %w", e.key, err)
	}
	if ls.stop != nil {
		ls.stop() // the egress proxy; the restore starts another
	}
	ls.sb, ls.stop = nil, nil
	ls.moving = moving
	return dirBytes(dir), nil
}

// dropPausedLocked tears down a sandbox paused with its files only (ls.mu
// is held): its running processes end as sandbox_paused, its contexts
// end. It returns how many processes were running.
func (m *Manager) dropPausedLocked(ls *liveState) int {
	n := 0
	for _, p := range ls.procs {
		p.out.mu.Lock()
		if p.info.Running {
			p.endReason = exitPaused
			n++
		}
		p.out.mu.Unlock()
	}
	m.dropLocked(ls)
	return n
}

// Resume resumes tenant's paused live sandbox id: restored with its
// memory when it was saved with it (its processes run on, its contexts
// keep their state), else made anew on its disk (its files only). A
// sandbox whose restore fails is made anew on its disk too, and the answer
// says what was kept (SandboxInfo.Resume). Resuming a sandbox that is not
// paused is ErrNotPaused.
func (m *Manager) Resume(ctx context.Context, tenant, id string) (sandbox.SandboxInfo, error) {
	e, err := m.pausable(ctx, tenant, id)
	if err != nil {
		return sandbox.SandboxInfo{}, err
	}
	defer func() { <-e.lock }()
	ls := e.live
	ls.mu.Lock()
	defer ls.mu.Unlock()
	m.mu.Lock()
	p := e.spec.Paused
	m.mu.Unlock()
	if p == nil {
		return sandbox.SandboxInfo{}, ErrNotPaused
	}
	start := time.Now()
	rep := &sandbox.SandboxResume{ProcessesLost: ls.pauseLost}
	if p.Memory {
		err := m.restoreLocked(ctx, e, rep)
		if err != nil && ctx.Err() != nil {
			// Still paused, its saved state whole: the client may retry.
			return sandbox.SandboxInfo{}, fmt.Errorf("resume %s: %w", e.key, err)
		}
		if err != nil {
			m.log.Warn("restore a paused sandbox; making it anew on its disk, its memory lost", "session", e.key, "err", err)
		}
	}
	if !rep.Memory {
		// Its files only: what ran in it is lost.
		_, lost := settle(ls.moving, nil, true)
		rep.ProcessesLost += lost
		ls.moving = nil
		m.closeKernelsLocked(ls)
		if err := os.RemoveAll(pauseDir(e)); err != nil {
			m.log.Warn("remove a paused sandbox's saved state", "session", e.key, "err", err)
		}
		m.mu.Lock()
		p.Memory = false // nothing is left to restore
		m.mu.Unlock()
		if _, err := m.startLocked(ctx, e, ""); err != nil {
			return sandbox.SandboxInfo{}, fmt.Errorf("resume %s: %w", e.key, err)
		}
	}
	m.mu.Lock()
	now := m.now().UTC()
	e.spec.Paused = nil
	ls.lost, ls.pauseLost = false, 0
	e.info.LastUsedAt = now
	e.info.ExpiresAt = now.Add(time.Duration(e.info.TTLSeconds) * time.Second)
	err = m.saveLocked(e)
	info := m.describeLocked(e)
	m.mu.Unlock()
	if err != nil {
		m.log.Warn("save session", "session", e.key, "err", err)
	}
	m.publish(ctx, e, info)
	rep.DurationMS = time.Since(start).Milliseconds()
	info.Resume = rep
	m.log.Info("sandbox resumed", "session", e.key, "memory", rep.Memory, "processes", rep.Processes,
		"processes_lost", rep.ProcessesLost, "contexts", rep.Contexts, "duration_ms", rep.DurationMS)
	return info, nil
}

// restoreLocked restores a sandbox paused with its memory (ls.mu is held)
// and takes its processes and contexts up again.
func (m *Manager) restoreLocked(ctx context.Context, e *entry, rep *sandbox.SandboxResume) error {
	ls := e.live
	sb, err := m.startLocked(ctx, e, pauseDir(e))
	if err != nil {
		if errors.Is(err, runtime.ErrNoImage) || errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no saved state to restore: %w", err)
		}
		return err
	}
	if _, err := sb.Agent().Ready(ctx); err != nil {
		_, lost := settle(ls.moving, nil, true)
		rep.ProcessesLost += lost
		ls.moving = nil
		m.dropLocked(ls)
		return fmt.Errorf("the restored sandbox's agent: %w", err)
	}
	rep.Memory = true
	kept, lost := settle(ls.moving, sb.Agent(), true)
	rep.Processes, rep.ProcessesLost = kept, rep.ProcessesLost+lost
	ls.moving = nil
	if ls.kernels != nil {
		rep.Contexts = ls.kernels.Resume(sb.Agent())
	}
	return nil
}

// markMovingLocked marks the running processes as moving with a pause and
// returns them (ls.mu is held).
func markMovingLocked(ls *liveState) []*process {
	var out []*process
	for _, p := range ls.procs {
		p.out.mu.Lock()
		if p.info.Running {
			p.moved = make(chan struct{})
			out = append(out, p)
		}
		p.out.mu.Unlock()
	}
	return out
}

// settle ends the move of processes with a pause. With c, the restored
// sandbox's agent, each is attached by its id; one that c does not run
// ended with the pause, as do all of them when the pause happened (saved)
// but there is no c (the restore failed). With neither, the pause failed
// and the sandbox runs on: they keep their handles. It returns how many
// were attached and how many ended with the pause.
func settle(procs []*process, c *agent.Client, saved bool) (kept, lost int) {
	for _, p := range procs {
		p.out.mu.Lock()
		h := p.p
		p.out.mu.Unlock()
		var np *agent.Process
		if c != nil {
			// Outside out.mu: Attach delivers held output to it.
			if x, err := c.Attach(h.ID(), p.out); err == nil {
				np = x
			}
		}
		p.out.mu.Lock()
		switch {
		case np != nil:
			p.p = np
			kept++
		case saved:
			p.endReason = exitPaused
			lost++
		}
		close(p.moved)
		p.moved = nil
		p.out.mu.Unlock()
	}
	return kept, lost
}

// wait waits for the process's end across pauses: a handle that ends
// because its sandbox was saved is followed by the one the resume gives.
func (p *process) wait() (agent.ExitStatus, error) {
	for {
		h := p.handle()
		st, err := h.Wait(context.Background())
		if err == nil {
			return st, nil
		}
		p.out.mu.Lock()
		moved, cur := p.moved, p.p
		p.out.mu.Unlock()
		switch {
		case cur != h:
			continue
		case moved != nil:
			<-moved
			continue
		}
		return st, err
	}
}

// handle returns the process's agent handle.
func (p *process) handle() *agent.Process {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.p
}

// endedBy is the exit error of a process that ended with a pause that
// could not keep it; "" for any other.
func (p *process) endedBy() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.endReason
}

// activeProc returns a process of tenant's live sandbox id to act on: the
// sandbox must not be paused.
func (m *Manager) activeProc(tenant, id string, pid int) (*process, error) {
	e, err := m.liveEntry(tenant, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	paused := e.spec.Paused != nil
	m.mu.Unlock()
	if paused {
		return nil, ErrPaused
	}
	return m.proc(tenant, id, pid)
}

// pausedInput is how an execution with the session id of a paused
// sandbox fails: an input error of its request, not Corral's.
func pausedInput(err error) error {
	if errors.Is(err, ErrPaused) {
		return &engine.InputError{Field: "session_id", Message: "the sandbox is paused; resume it (POST /v1/sandboxes/{id}/resume) and run again"}
	}
	return err
}

func alive(sb runtime.Sandbox) bool {
	select {
	case <-sb.Agent().Done():
		return false
	default:
		return true
	}
}

// dirBytes is the size of the files in dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
