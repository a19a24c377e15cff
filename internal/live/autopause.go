package live

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// The server pauses a live sandbox by itself in two cases: at its timeout
// when its lifecycle says so (sandbox.SandboxLifecycle.OnTimeout "pause";
// E2B's autoPause), and when nobody has called it for
// Config.PauseAfterIdle. A call is anything that uses the sandbox: a call
// that needs it running (held: processes, files, contexts, ports, an
// execution with its id), one on a process of it (stdin, signals, its
// output followed), a byte through one of its port connections, a pause
// or a resume.
//
// A sandbox the server paused wakes on its next call that needs it
// running: the call resumes it (Resume) and then goes on, its caller
// waiting the resume out within its own deadline. One a client paused
// wakes so only when its lifecycle asks (AutoResume); otherwise such a
// call is ErrPaused, and the client resumes it. Why it was paused is kept
// in its spec (Spec.Paused.Reason), so the rule holds across restarts.
//
// A sandbox paused at its timeout is kept for the paused TTL it was made
// with (Spec.KeepAfterTimeout): its workspace's expiry is that much past
// its timeout while it runs, so the reaper never takes it first.

const (
	// OnTimeoutKill and OnTimeoutPause are a lifecycle's OnTimeout.
	OnTimeoutKill  = "kill"
	OnTimeoutPause = "pause"
	// lifecycleEvery is how often Run looks for sandboxes to pause.
	lifecycleEvery = time.Second
	// wakeTries bounds the resumes of one call (a sandbox paused again
	// right after its resume).
	wakeTries = 3
	// wakeWait bounds the resume of a call that has no deadline of its
	// own.
	wakeWait = time.Minute
)

// checkLifecycle checks a creation request's lifecycle.
func checkLifecycle(l *sandbox.SandboxLifecycle) error {
	if l == nil {
		return nil
	}
	switch l.OnTimeout {
	case "", OnTimeoutKill:
		if l.KeepMemory != nil {
			return validate.Refuse("lifecycle.keep_memory", "only with on_timeout \"pause\"")
		}
	case OnTimeoutPause:
	default:
		return validate.Refuse("lifecycle.on_timeout", "must be \"kill\" or \"pause\"")
	}
	return nil
}

// pausesAtTimeout reports whether a sandbox of lifecycle l is paused at its
// timeout.
func pausesAtTimeout(l *sandbox.SandboxLifecycle) bool {
	return l != nil && l.OnTimeout == OnTimeoutPause
}

// lifecycleOf is l with its defaults filled in, as a sandbox's Info
// describes it.
func lifecycleOf(l *sandbox.SandboxLifecycle) *sandbox.SandboxLifecycle {
	out := sandbox.SandboxLifecycle{OnTimeout: OnTimeoutKill}
	if l != nil {
		out.AutoResume = l.AutoResume
		if pausesAtTimeout(l) {
			keep := l.KeepMemory == nil || *l.KeepMemory
			out.OnTimeout, out.KeepMemory = OnTimeoutPause, &keep
		}
	}
	return &out
}

// touch records a call of the sandbox (its idle clock starts again).
func (s *Sandbox) touch() { s.called.Store(s.m.table.Now().UnixNano()) }

// idleFor is how long nobody has called the sandbox, at now; since this
// node made its handle if nobody has.
func (s *Sandbox) idleFor(now time.Time) time.Duration {
	c := s.called.Load()
	if c == 0 {
		s.called.CompareAndSwap(0, now.UnixNano())
		return 0
	}
	return now.Sub(time.Unix(0, c))
}

// wakes reports whether the sandbox, paused, resumes on a call that needs
// it running: the server paused it, or its lifecycle asks for it.
func (s *Sandbox) wakes() bool {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	p := s.spec.Paused
	if p == nil {
		return false
	}
	l := s.spec.Request.Lifecycle
	return (p.Reason != "" && p.Reason != sandbox.PauseClient) || (l != nil && l.AutoResume)
}

// wake resumes the sandbox for a call that needs it running (neither its
// workspace's lock nor s.mu is held). A resume by another call meanwhile
// is fine.
func (s *Sandbox) wake(ctx context.Context) error {
	info, err := s.Resume(ctx)
	if errors.Is(err, ErrNotPaused) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resume %s for a call: %w", s.w.Key(), err)
	}
	s.m.log.InfoContext(ctx, "sandbox resumed by a call", "sandbox", s.w.Key(), "memory", info.Resume.Memory)
	return nil
}

// Run pauses this node's live sandboxes that are due (at their timeout
// with a lifecycle that pauses, or idle for Config.PauseAfterIdle) every
// second, and with a snapshot store collects its unreferenced chunks every
// gcEvery, until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	tick := time.NewTicker(lifecycleEvery)
	defer tick.Stop()
	var gc <-chan time.Time
	if m.cfg.Snapshots != nil {
		t := time.NewTicker(gcEvery)
		defer t.Stop()
		gc = t.C
	}
	for {
		m.pauseDue(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-gc:
			m.collect(ctx)
		}
	}
}

// pauseDue pauses the sandboxes that are due now. One in use (its
// workspace's lock held: an execution, a pause or a resume) is left to
// the next round.
func (m *Manager) pauseDue(ctx context.Context) {
	for _, w := range m.table.All() {
		s, ok := m.table.State(w).Occupant.(*Sandbox)
		if !ok || ctx.Err() != nil {
			continue
		}
		reason, memory := s.due()
		if reason == "" || !w.TryLock() {
			continue
		}
		// Again under the lock: a call may have come meanwhile.
		if reason, memory = s.due(); reason != "" && !m.table.State(w).Gone {
			m.autoPause(ctx, s, reason, memory)
		}
		w.Unlock()
	}
}

// due says why the sandbox is to be paused now ("": it is not) and
// whether with its memory.
func (s *Sandbox) due() (reason string, memory bool) {
	m := s.m
	now := m.table.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.table.State(s.w)
	if s.spec.Paused != nil || st.Gone {
		return "", false
	}
	if l := s.spec.Request.Lifecycle; pausesAtTimeout(l) && !now.Before(st.Info.ExpiresAt.Add(-s.spec.KeepAfterTimeout)) {
		return sandbox.PauseTimeout, l.KeepMemory == nil || *l.KeepMemory
	}
	if m.cfg.PauseAfterIdle > 0 && s.idleFor(now) >= m.cfg.PauseAfterIdle {
		return sandbox.PauseIdle, true
	}
	return "", false
}

// Bounds of the wait for a sandbox's running code cells before a pause by
// the server: an idle sandbox has none, and one with a cell running is not
// idle; at the timeout they have a while to end.
const (
	idleCellWait    = 2 * time.Second
	timeoutCellWait = time.Minute
)

// autoPause pauses s for reason (its workspace's lock is held). At the
// timeout a sandbox that cannot be saved with its memory is paused with its
// files, not left running; an idle one that cannot be paused (a cell still
// running) counts as called now and is tried again an idle period later.
func (m *Manager) autoPause(ctx context.Context, s *Sandbox, reason string, memory bool) {
	wait := timeoutCellWait
	if reason == sandbox.PauseIdle {
		wait = idleCellWait
	}
	pctx, cancel := context.WithTimeout(ctx, wait)
	err := s.pauseLocked(pctx, reason, memory)
	cancel()
	switch {
	case err == nil || errors.Is(err, ErrPaused) || ctx.Err() != nil:
		return
	case reason == sandbox.PauseIdle:
		s.touch()
		m.log.Info("an idle sandbox was not paused; trying again later", "sandbox", s.w.Key(), "err", err)
		return
	case memory:
		m.log.Warn("pause a sandbox with its memory at its timeout; pausing it with its files only", "sandbox", s.w.Key(), "err", err)
		if err = s.pauseLocked(ctx, reason, false); err == nil || errors.Is(err, ErrPaused) {
			return
		}
	}
	m.log.Error("pause a sandbox at its timeout", "sandbox", s.w.Key(), "err", err)
}
