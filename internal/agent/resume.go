//go:build linux

package agent

import (
	"encoding/json"
	"os"
)

// Suspending. A sandbox paused with its memory (gVisor's checkpoint, then a
// restore) keeps the agent and every process as they were, but its control
// stream is new: the restored sandbox's stdin and stdout are the pipes of
// the runtime that restored it. Two frames carry the agent across:
//
//   - msgSuspend, before the checkpoint: the agent answers msgOK and then
//     sends nothing more, holding the lock every frame is written under. No
//     frame can then be cut in two by the checkpoint, half on the old
//     stream and half on the new; output and exits wait, in the processes'
//     pipes and the agent's goroutines, which the checkpoint keeps. The
//     host sends nothing after msgSuspend (Client.Suspend), since a
//     request answered on the reading goroutine would block it for good.
//   - msgResume, the first frame on the new stream (or on the old one, if
//     the checkpoint failed): the agent answers with a hello whose Resume
//     says which processes run and the highest request id it has seen, so
//     that the new client numbers its requests above every id still in
//     use, and then sends again.

// resumeState is the agent's side of suspending. The goroutine that reads
// the control stream alone touches suspended and lastID.
type resumeState struct {
	// suspended: the agent holds wmu (onSuspend) until onResume.
	suspended bool
	// lastID is the highest frame id the host has used.
	lastID uint32
	// reporting are processes that have ended and whose exit frame is
	// not sent yet (it waits for wmu while the agent is suspended), by
	// id: pids. Guarded by Agent.mu.
	reporting map[uint32]int
}

// reporting records that p's exit is about to be sent; a.mu is held.
func (a *Agent) reporting(p *proc) {
	if a.resume.reporting == nil {
		a.resume.reporting = map[uint32]int{}
	}
	a.resume.reporting[p.id] = p.pid
}

// reported records that p's exit was sent.
func (a *Agent) reported(p *proc) {
	a.mu.Lock()
	delete(a.resume.reporting, p.id)
	a.mu.Unlock()
}

func (a *Agent) onSuspend(f frame) {
	if !a.resume.suspended {
		a.wmu.Lock()
		a.resume.suspended = true
	}
	if err := writeFrame(a.out, msgOK, f.id, nil); err != nil {
		a.log.Error("answer suspend", "err", err)
	}
}

func (a *Agent) onResume(f frame) {
	if !a.resume.suspended {
		a.wmu.Lock() // a new stream without a suspend before: frames may have been cut
	}
	a.resume.suspended = false
	defer a.wmu.Unlock()
	// The tunnels were the old host's; the new one knows none of them.
	a.closeTunnels()
	st := &ResumeState{LastID: a.resume.lastID, Processes: a.live()}
	b, err := json.Marshal(Hello{Version: Version, PID: os.Getpid(), UID: os.Getuid(), Resume: st})
	if err != nil {
		a.log.Error("marshal resume", "err", err)
		return
	}
	if err := writeFrame(a.out, msgHello, 0, b); err != nil {
		a.log.Error("answer resume", "err", err)
	}
}

// live lists the processes whose exit the host has not been sent: those
// that run, and those that ended while the agent was suspended, whose exit
// frame follows the hello.
func (a *Agent) live() []LiveProcess {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]LiveProcess, 0, len(a.procs)+len(a.resume.reporting))
	for pid, p := range a.procs {
		out = append(out, LiveProcess{ID: p.id, PID: pid, Persistent: p.persistent})
	}
	for id, pid := range a.resume.reporting {
		out = append(out, LiveProcess{ID: id, PID: pid, Ended: true})
	}
	return out
}
