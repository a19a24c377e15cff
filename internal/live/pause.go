package live

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// Pausing a live sandbox. Its files always survive: its disk stays in the
// session's directory. A sandbox that can be saved with its memory
// (runtime.Pauser: gVisor's, through runsc checkpoint) is saved to the
// session's directory as well, and Resume restores it: its processes run
// on, with the same pids, process table and output buffers on this node,
// and its code contexts keep their variables (kernel.Contexts.Suspend and
// Resume). A node process that did not pause it (this node started again
// after a crash) takes its process list and contexts up from the
// description the pause wrote beside the memory (hoststate.go). Any other (runc's: no CRIU here) is torn down; Resume makes a
// new sandbox on the same disk, and its processes and contexts are lost,
// which the resume's answer says.
//
// While paused, every call that needs the sandbox (processes started,
// stdin, signals, files, contexts, executions with its id) fails
// with ErrPaused: resuming costs a restore, which the client asks for
// (Resume) — unless the sandbox wakes on a call (one the server paused at
// its timeout or idle, or one whose lifecycle asks for auto-resume;
// autopause.go), which the call then resumes. What this node holds of it
// (its description, its process list and their buffered output) stays
// readable. Its timeout stops while it is
// paused; a paused sandbox is kept for Config.PausedTTL, and a resume gives
// it its whole timeout again.

// DefaultPausedTTL is how long a paused sandbox is kept when
// Config.PausedTTL is zero.
const DefaultPausedTTL = 7 * 24 * time.Hour

func (m *Manager) pausedTTL() time.Duration {
	if m.cfg.PausedTTL > 0 {
		return m.cfg.PausedTTL
	}
	return DefaultPausedTTL
}

// pauseDir is where a live sandbox's memory is saved.
func (s *Sandbox) pauseDir() string { return filepath.Join(s.w.Dir(), "paused") }

// lock takes the sandbox's workspace lock: a running execution of it ends
// first.
func (s *Sandbox) lock(ctx context.Context) error {
	if _, err := s.m.Get(s.tenant, s.id); err != nil {
		return err
	}
	w, err := s.m.table.Lock(ctx, s.tenant, s.id)
	if errors.Is(err, ErrNotFound) {
		return s.m.notHere(s.tenant, s.id)
	}
	if err != nil {
		return err
	}
	if w != s.w || s.m.table.State(w).Expired {
		w.Unlock()
		return ErrNotFound
	}
	return nil
}

// pause pauses the sandbox: with its memory where its runtime can save
// it, else with its files only. Running cells of its contexts and a
// running execution end first (ctx bounds the wait). Pausing a paused
// sandbox is ErrPaused.
func (s *Sandbox) pause(ctx context.Context) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.w.Unlock()
	return s.pauseLocked(ctx, sandbox.PauseClient, true)
}

// pauseLocked pauses the sandbox for reason (the workspace's lock is
// held): with its memory if memory and its runtime can save it.
func (s *Sandbox) pauseLocked(ctx context.Context, reason string, memory bool) error {
	m := s.m
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused() {
		return ErrPaused
	}
	start := time.Now()
	p := &sandbox.SandboxPause{Reason: reason}
	if memory && s.sb != nil && alive(s.sb) {
		if _, ok := s.sb.(runtime.Pauser); ok {
			size, err := s.pauseMemoryLocked(ctx)
			switch {
			case err == nil:
				p.Memory, p.ImageBytes = true, size
			case errors.Is(err, runtime.ErrNotPausable):
				m.log.Warn("a sandbox cannot be saved with its memory; pausing it with its files only", "sandbox", s.w.Key(), "err", err)
			default:
				return err
			}
		}
	}
	if !p.Memory {
		s.pauseLost = s.dropPausedLocked()
	}
	m.mu.Lock()
	now := m.table.Now().UTC()
	p.PausedAt, p.DurationMS = now, time.Since(start).Milliseconds()
	s.spec.Paused = p
	err := m.table.SetLive(s.w, s.spec)
	if _, uerr := m.table.Update(s.w, func(i *workspace.Info) { i.ExpiresAt = now.Add(m.pausedTTL()) }); err == nil {
		err = uerr
	}
	m.mu.Unlock()
	if id := s.snapshotPausedLocked(ctx); id != "" {
		m.mu.Lock()
		p.SnapshotID = id
		if serr := m.table.SetLive(s.w, s.spec); err == nil {
			err = serr
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	info := s.infoLocked()
	m.mu.Unlock()
	m.publish(ctx, s, info)
	if err != nil {
		return fmt.Errorf("pause %s: paused, but its state was not saved (a restart of this node makes it again with its files): %w", s.w.Key(), err)
	}
	m.log.Info("sandbox paused", "sandbox", s.w.Key(), "reason", reason, "memory", p.Memory, "image_bytes", p.ImageBytes,
		"duration_ms", p.DurationMS, "snapshot", p.SnapshotID)
	return nil
}

// pauseMemoryLocked saves the sandbox with its memory (s.mu is held) and
// returns the saved state's size. On error the sandbox runs on as it was.
func (s *Sandbox) pauseMemoryLocked(ctx context.Context) (int64, error) {
	dir := s.pauseDir()
	// What an earlier pause left (its state saved, its record not) goes.
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("pause %s: %w", s.w.Key(), err)
	}
	if s.contexts != nil {
		if err := s.contexts.Suspend(ctx); err != nil {
			return 0, fmt.Errorf("pause %s: %w", s.w.Key(), err)
		}
	}
	moving := s.markMovingLocked()
	if err := s.m.fleet.Pause(ctx, s.sb, dir); err != nil {
		settle(moving, nil, false)
		if s.contexts != nil {
			s.contexts.Resume(nil)
		}
		return 0, fmt.Errorf("pause %s: %w", s.w.Key(), err)
	}
	if s.stop != nil {
		s.stop() // the egress proxy; the restore starts another
	}
	s.sb, s.stop = nil, nil
	s.moving = moving
	// Without it, a node process that did not pause the sandbox restores
	// its memory but lists no process and finds no context (hoststate.go).
	if err := writeHostState(dir, s.hostStateLocked()); err != nil {
		s.m.log.Warn("save what this node holds of a paused sandbox: another node process would resume it without its process list and contexts",
			"sandbox", s.w.Key(), "err", err)
	}
	return dirBytes(dir), nil
}

// dropPausedLocked tears down a sandbox paused with its files only (s.mu
// is held): its running processes end as sandbox_paused, its contexts
// end. It returns how many processes were running.
func (s *Sandbox) dropPausedLocked() int {
	n := 0
	for _, p := range s.procs {
		p.out.mu.Lock()
		if p.info.Running {
			p.endReason = exitPaused
			n++
		}
		p.out.mu.Unlock()
	}
	s.dropLocked()
	return n
}

// resume resumes the paused sandbox: restored with its memory when it was
// saved with it (its processes run on, its contexts keep their state),
// else made anew on its disk (its files only). A sandbox whose restore
// fails is made anew on its disk too, and the answer says what was kept
// (sandbox.Info.Resume). Resuming a sandbox that is not paused is
// ErrNotPaused.
func (s *Sandbox) resume(ctx context.Context) (sandbox.Info, error) {
	m := s.m
	s.touch()
	if err := s.lock(ctx); err != nil {
		return sandbox.Info{}, err
	}
	defer s.w.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	m.mu.Lock()
	p := s.spec.Paused
	m.mu.Unlock()
	if p == nil {
		return sandbox.Info{}, ErrNotPaused
	}
	start := time.Now()
	rep := &sandbox.SandboxResume{ProcessesLost: s.pauseLost}
	if err := s.reviveLocked(ctx, p, rep); err != nil {
		return sandbox.Info{}, err
	}
	m.mu.Lock()
	now := m.table.Now().UTC()
	s.spec.Paused = nil
	s.lost, s.pauseLost = false, 0
	err := m.table.SetLive(s.w, s.spec)
	if _, uerr := m.table.Update(s.w, func(i *workspace.Info) {
		i.LastUsedAt = now
		i.ExpiresAt = now.Add(time.Duration(i.TTLSeconds)*time.Second + s.spec.KeepAfterTimeout)
	}); err == nil {
		err = uerr
	}
	info := s.infoLocked()
	m.mu.Unlock()
	if err != nil {
		m.log.Warn("save sandbox", "sandbox", s.w.Key(), "err", err)
	}
	m.publish(ctx, s, info)
	// It runs again: the snapshot it was kept as is its past.
	m.dropSnapshot(ctx, s.w.Key(), p.SnapshotID)
	rep.DurationMS = time.Since(start).Milliseconds()
	info.Resume = rep
	m.log.Info("sandbox resumed", "sandbox", s.w.Key(), "memory", rep.Memory, "processes", rep.Processes,
		"processes_lost", rep.ProcessesLost, "contexts", rep.Contexts, "duration_ms", rep.DurationMS)
	return info, nil
}

// reviveLocked brings back a sandbox saved as p says (s.mu is held):
// restored with its memory when p.Memory, else, or when that restore
// fails, made anew on its disk (its processes and contexts lost, and
// p.Memory cleared: nothing is left to restore). rep says what was kept.
// A restore that fails on ctx leaves it saved, whole: the caller may
// retry.
func (s *Sandbox) reviveLocked(ctx context.Context, p *sandbox.SandboxPause, rep *sandbox.SandboxResume) error {
	m := s.m
	m.mu.Lock()
	memory := p.Memory
	m.mu.Unlock()
	if memory {
		err := s.restoreLocked(ctx, rep)
		if err != nil && ctx.Err() != nil {
			// Still paused, its saved state whole: the client may retry.
			return fmt.Errorf("resume %s: %w", s.w.Key(), err)
		}
		if err != nil {
			m.log.Warn("restore a paused sandbox; making it anew on its disk, its memory lost", "sandbox", s.w.Key(), "err", err)
		}
	}
	if !rep.Memory {
		// Its files only: what ran in it is lost.
		_, lost := settle(s.moving, nil, true)
		rep.ProcessesLost += lost
		s.moving = nil
		s.closeContextsLocked()
		if err := os.RemoveAll(s.pauseDir()); err != nil {
			m.log.Warn("remove a paused sandbox's saved state", "sandbox", s.w.Key(), "err", err)
		}
		m.mu.Lock()
		p.Memory = false // nothing is left to restore
		m.mu.Unlock()
		if _, err := s.startLocked(ctx, ""); err != nil {
			return fmt.Errorf("resume %s: %w", s.w.Key(), err)
		}
	}
	return nil
}

// restoreLocked restores a sandbox paused with its memory (s.mu is held)
// and takes its processes and contexts up again.
func (s *Sandbox) restoreLocked(ctx context.Context, rep *sandbox.SandboxResume) error {
	var st *hostState
	if s.contexts == nil && len(s.procs) == 0 {
		// This node process did not pause it: what the pausing one held
		// is beside the memory (read before the restore removes it).
		h, err := readHostState(s.pauseDir())
		switch {
		case err == nil:
			st = &h
		case !hostStateMissing(err):
			s.m.log.Warn("resume a paused sandbox without its process list and contexts", "sandbox", s.w.Key(), "err", err)
		}
	}
	// A restore that fails (but for ctx: the client may retry) lists
	// what the description holds, the running processes ended with the
	// pause.
	failed := func() {
		if st != nil && ctx.Err() == nil {
			_, lost, _ := s.rebuildLocked(nil, *st)
			rep.ProcessesLost += lost
		}
	}
	sb, err := s.startLocked(ctx, s.pauseDir())
	if err != nil {
		failed()
		if errors.Is(err, runtime.ErrNoImage) || errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no saved state to restore: %w", err)
		}
		return err
	}
	if _, err := sb.Agent().Ready(ctx); err != nil {
		_, lost := settle(s.moving, nil, true)
		rep.ProcessesLost += lost
		s.moving = nil
		s.dropLocked()
		failed()
		return fmt.Errorf("the restored sandbox's agent: %w", err)
	}
	rep.Memory = true
	kept, lost := settle(s.moving, sb.Agent(), true)
	rep.Processes, rep.ProcessesLost = kept, rep.ProcessesLost+lost
	s.moving = nil
	switch {
	case st != nil:
		kept, lost, contexts := s.rebuildLocked(sb.Agent(), *st)
		rep.Processes, rep.ProcessesLost, rep.Contexts = rep.Processes+kept, rep.ProcessesLost+lost, contexts
	case s.contexts != nil:
		rep.Contexts = s.contexts.Resume(sb.Agent())
	}
	return nil
}

// markMovingLocked marks the running processes as moving with a pause and
// returns them (s.mu is held).
func (s *Sandbox) markMovingLocked() []*Process {
	var out []*Process
	for _, p := range s.procs {
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
func settle(procs []*Process, c *agent.Client, saved bool) (kept, lost int) {
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
func (p *Process) wait() (agent.ExitStatus, error) {
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
func (p *Process) handle() *agent.Process {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.p
}

// endedBy is the exit error of a process that ended with a pause that
// could not keep it; "" for any other.
func (p *Process) endedBy() string {
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	return p.endReason
}

// pausedInput is how an execution with the id of a paused sandbox fails:
// an input error of its request, not Corral's.
func pausedInput(err error) error {
	if errors.Is(err, ErrPaused) {
		return validate.Refuse("session_id", "the sandbox is paused; resume it (POST /v1/sandboxes/{id}/resume) and run again")
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
