package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/sandbox"
)

// What the node held of a sandbox paused with its memory, for a node
// process that did not pause it (this node started again after a crash,
// later another node) to hold it again after the restore: its process
// list, with the agent's id of each running process to attach to, and its
// code contexts (kernel.Saved). The pause writes it as a file beside the
// saved memory (hostStateFile in the pause directory), not in the
// sandbox's record: it describes that memory (the agent ids are the
// restored agent's), so it lives and goes with it, and a snapshot that
// carries the directory to another node carries it too, whole and
// self-contained. The restore removes the directory; the description is
// read before.
//
// What it does not keep: the processes' buffered output (a process taken
// up from it starts its event log again at its start event, then the
// output written since the pause, up to what the agent held; what came
// before the pause is gone), and an ended process's output. Ended
// processes are listed again as they ended.

// hostStateFile is the description's name in the pause directory.
const hostStateFile = "corral-host.json"

// hostStateVersion is the description's format; a reader refuses others.
const hostStateVersion = 1

// hostState is the description.
type hostState struct {
	Version   int            `json:"version"`
	Processes []savedProcess `json:"processes,omitempty"`
	Contexts  kernel.Saved   `json:"contexts"`
}

// savedProcess is one process of a hostState: ended ones first, oldest
// end first, then the running ones by pid.
type savedProcess struct {
	Info sandbox.ProcessInfo `json:"info"`
	// Agent is the agent's id of a running process, to attach to.
	Agent       uint32 `json:"agent,omitempty"`
	StdinClosed bool   `json:"stdin_closed,omitempty"`
	// Exit is how an ended one ended, typed (Info.Exit is its wire form).
	Exit *savedExit `json:"exit,omitempty"`
}

type savedExit struct {
	Code       int       `json:"code"`
	Signal     int       `json:"signal,omitempty"`
	Ended      string    `json:"ended,omitempty"`
	At         time.Time `json:"at"`
	DurationMS int64     `json:"duration_ms"`
}

// hostStateLocked describes what the node holds of the sandbox (s.mu is
// held), which was just saved with its memory: its contexts are held by
// Suspend, its running processes are moving.
func (s *Sandbox) hostStateLocked() hostState {
	st := hostState{Version: hostStateVersion}
	if s.contexts != nil {
		st.Contexts = s.contexts.Save()
	}
	pids := slices.Clone(s.ended)
	for pid := range s.procs {
		if !slices.Contains(s.ended, pid) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids[len(s.ended):])
	for _, pid := range pids {
		p := s.procs[pid]
		if p == nil {
			continue
		}
		p.out.mu.Lock()
		sp := savedProcess{Info: p.info, StdinClosed: p.stdinClosed}
		switch {
		case p.exit != nil:
			x := p.exit
			sp.Exit = &savedExit{Code: x.Code, Signal: int(x.Signal), Ended: x.Ended, At: x.At, DurationMS: x.Duration.Milliseconds()}
		case p.moved != nil:
			sp.Agent = p.p.ID()
		}
		p.out.mu.Unlock()
		if sp.Exit == nil && sp.Agent == 0 {
			continue // its end is being recorded: nothing to attach to
		}
		st.Processes = append(st.Processes, sp)
	}
	return st
}

// writeHostState writes st to dir atomically and durably: a crash leaves
// the whole file or none.
func writeHostState(dir string, st hostState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode the sandbox's description: %w", err)
	}
	p := filepath.Join(dir, hostStateFile)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write the sandbox's description: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write the sandbox's description: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// readHostState reads the description in dir; fs.ErrNotExist when there
// is none (a pause by a server before it was written).
func readHostState(dir string) (hostState, error) {
	b, err := os.ReadFile(filepath.Join(dir, hostStateFile))
	if err != nil {
		return hostState{}, fmt.Errorf("read the sandbox's description: %w", err)
	}
	var st hostState
	if err := json.Unmarshal(b, &st); err != nil {
		return hostState{}, fmt.Errorf("read the sandbox's description: %w", err)
	}
	if st.Version != hostStateVersion {
		return hostState{}, fmt.Errorf("read the sandbox's description: version %d, want %d: %w", st.Version, hostStateVersion, errors.ErrUnsupported)
	}
	return st, nil
}

// rebuildLocked takes up the processes and contexts st describes in the
// sandbox restored from its pause, whose agent is c (s.mu is held; this
// node holds none of them). A running process is attached by its agent
// id; one that c does not run ended with the pause (sandbox_paused), as in
// settle. With c nil the restore failed: the processes are listed, every
// running one ended with the pause, and the contexts are not taken up. It
// returns how many processes were attached and how many ended with the
// pause, and how many contexts went on with their process.
func (s *Sandbox) rebuildLocked(c *agent.Client, st hostState) (kept, lost, contexts int) {
	kept, lost = s.rebuildProcessesLocked(c, st)
	if c == nil {
		return kept, lost, 0
	}
	k, n, err := kernel.Restore(c, kernel.Options{Env: sortedEnv(s.env), Sandbox: s.id}, st.Contexts)
	if err != nil {
		s.m.log.Warn("take up a restored sandbox's contexts", "sandbox", s.w.Key(), "err", err)
	}
	if s.contexts != nil {
		s.closeContextsLocked() // made with the sandbox: it has none
	}
	s.contexts = k
	return kept, lost, n
}

func (s *Sandbox) rebuildProcessesLocked(c *agent.Client, st hostState) (kept, lost int) {
	m := s.m
	for _, sp := range st.Processes {
		out := newOutput(m.cfg.OutputBuffer)
		proc := &Process{sb: s, out: out, info: sp.Info, stdinClosed: sp.StdinClosed}
		proc.info.Exit = nil
		out.mu.Lock()
		out.proc = proc
		out.addLocked(sandbox.ProcessEvent{Type: sandbox.ProcessEventStart, PID: sp.Info.PID})
		out.mu.Unlock()
		var x *Exit
		switch {
		case sp.Exit != nil:
			x = &Exit{Code: sp.Exit.Code, Signal: syscall.Signal(sp.Exit.Signal), Ended: sp.Exit.Ended, At: sp.Exit.At,
				Duration: time.Duration(sp.Exit.DurationMS) * time.Millisecond}
		default:
			var h *agent.Process
			if c != nil {
				h, _ = c.Attach(sp.Agent, out) // an error: it is not there
			}
			if h != nil {
				proc.p = h
				kept++
			} else {
				now := m.table.Now().UTC()
				x = &Exit{Code: -1, Ended: exitPaused, At: now, Duration: now.Sub(sp.Info.StartedAt)}
				lost++
			}
		}
		s.procs[sp.Info.PID] = proc
		if x != nil {
			out.end(*x)
			s.endedLocked(proc)
			continue
		}
		go s.watch(proc, sp.Info.StartedAt)
	}
	return kept, lost
}

// hostStateMissing reports whether err says there is no description.
func hostStateMissing(err error) bool { return errors.Is(err, fs.ErrNotExist) }
