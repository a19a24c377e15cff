package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// The host's side of suspending (the agent's is resume.go): Suspend before a
// checkpoint; after a restore, NewResumedClient on the new stream, then
// Attach for each process to go on with; after a failed checkpoint, Resume.

// ErrSuspended reports a request made while the agent is suspended.
var ErrSuspended = errors.New("sandbox agent suspended")

// ErrNoProcess reports an Attach to a process the resumed agent did not
// list, or one attached already.
var ErrNoProcess = errors.New("no such process in the resumed sandbox")

// ResumeState is what a resumed agent reports in its hello.
type ResumeState struct {
	// LastID is the highest request id the agent has seen; a resumed
	// client numbers its own above it.
	LastID uint32 `json:"last_id"`
	// Processes are those whose end the host has not been told, by the id
	// of the request that started them (Process.ID).
	Processes []LiveProcess `json:"processes"`
}

// LiveProcess is a process of a resumed agent whose end the host has not
// been told: one that runs, or one that has ended (Ended), whose exit
// follows.
type LiveProcess struct {
	ID         uint32 `json:"id"`
	PID        int    `json:"pid"`
	Persistent bool   `json:"persistent,omitempty"`
	Ended      bool   `json:"ended,omitempty"`
}

// resumeID is the id of msgResume and of the hello that answers it: no
// request uses 0, so no late answer to an old request can be taken for it.
const resumeID = 0

// Suspend makes the agent stop sending, so that the sandbox can be
// checkpointed between two frames. Once Suspend is called, the client
// refuses every request with ErrSuspended until Resume; the sandbox's
// processes go on running, their output waits in the sandbox. Output and
// answers that were under way before Suspend arrive before it returns.
func (c *Client) Suspend(ctx context.Context) error {
	id, k := c.newCall()
	c.wmu.Lock()
	if c.suspended {
		c.wmu.Unlock()
		c.forgetCall(id)
		return nil
	}
	// The flag and the frame go together: nothing the agent would have
	// to answer can follow msgSuspend on the stream.
	c.suspended = true
	err := writeFrame(c.w, msgSuspend, id, nil)
	c.wmu.Unlock()
	if err != nil {
		c.forgetCall(id)
		return fmt.Errorf("%w: %w", ErrLost, err)
	}
	// The agent drops every tunnel when it resumes: they end now.
	c.failTunnels(fmt.Errorf("tunnel: %w", ErrSuspended))
	if _, err := c.wait(ctx, id, k); err != nil {
		return fmt.Errorf("suspend agent: %w", err)
	}
	return nil
}

// Resume lets a suspended agent send again on this client's stream (the
// checkpoint failed and the sandbox runs on) and returns its state.
func (c *Client) Resume(ctx context.Context) (ResumeState, error) {
	k := &call{done: make(chan struct{})}
	c.mu.Lock()
	c.waiters[resumeID] = k
	c.mu.Unlock()
	c.wmu.Lock()
	err := writeFrame(c.w, msgResume, resumeID, nil)
	c.wmu.Unlock()
	if err != nil {
		c.forgetCall(resumeID)
		return ResumeState{}, fmt.Errorf("%w: %w", ErrLost, err)
	}
	payload, err := c.wait(ctx, resumeID, k)
	if err != nil {
		return ResumeState{}, fmt.Errorf("resume agent: %w", err)
	}
	var h Hello
	if err := json.Unmarshal(payload, &h); err != nil || h.Resume == nil {
		return ResumeState{}, fmt.Errorf("decode resume: %w", ErrProtocol)
	}
	c.wmu.Lock()
	c.suspended = false
	c.wmu.Unlock()
	return *h.Resume, nil
}

// NewResumedClient is NewClient for the new control stream of a sandbox
// restored from a checkpoint, whose agent was suspended (Suspend) when it
// was taken. It asks the agent to resume; Ready then returns a Hello whose
// Resume lists the running processes. Their output is held (up to
// maxHeld bytes each, the rest dropped) until Attach gives it a receiver.
func NewResumedClient(r io.Reader, w io.Writer, closer io.Closer) *Client {
	c := NewClient(r, w, closer)
	// Nothing else is sent before the hello: Ready comes first.
	c.wmu.Lock()
	if err := writeFrame(c.w, msgResume, resumeID, nil); err != nil {
		// The stream is broken: the read loop ends too, and Ready says so.
		c.Close()
	}
	c.wmu.Unlock()
	return c
}

// resumed takes the hello of a resumed agent (from the read loop, before
// any later frame): requests are numbered above the agent's, and every
// running process gets a handle whose output is held until Attach.
func (c *Client) resumed(st *ResumeState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nextID = max(c.nextID, st.LastID)
	if c.held == nil {
		c.held = map[uint32]*Process{}
	}
	for _, lp := range st.Processes {
		p := &Process{c: c, id: lp.ID, PID: lp.PID, out: &heldOutput{}, done: make(chan struct{})}
		c.procs[lp.ID] = p
		c.held[lp.ID] = p
	}
}

// Attach returns the handle of process id (ResumeState.Processes), which a
// resumed agent runs; out receives what the process wrote since the resume
// (up to maxHeld bytes of each stream), then its output as it comes. A
// process that has ended since can still be attached: Wait returns how.
func (c *Client) Attach(id uint32, out Output) (*Process, error) {
	c.mu.Lock()
	p := c.held[id]
	delete(c.held, id)
	c.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("attach process %d: %w", id, ErrNoProcess)
	}
	p.out.(*heldOutput).attach(out)
	return p, nil
}

// maxHeld caps the output held for a process nobody has attached to yet.
const maxHeld = 1 << 20

// heldOutput keeps a resumed process's output until attach names its
// receiver, then passes everything on in order.
type heldOutput struct {
	mu   sync.Mutex
	to   Output
	held []heldChunk
	size int
}

type heldChunk struct {
	typ byte
	b   []byte
}

func (h *heldOutput) put(typ byte, b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.to != nil {
		deliverTo(h.to, typ, b)
		return
	}
	if h.size+len(b) > maxHeld {
		return
	}
	h.size += len(b)
	h.held = append(h.held, heldChunk{typ, append([]byte(nil), b...)})
}

func (h *heldOutput) attach(to Output) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.held {
		if to != nil {
			deliverTo(to, ch.typ, ch.b)
		}
	}
	h.held, h.size = nil, 0
	h.to = to
	if to == nil {
		h.to = discard{}
	}
}

func deliverTo(o Output, typ byte, b []byte) {
	switch typ {
	case msgStdout:
		o.Stdout(b)
	case msgStderr:
		o.Stderr(b)
	case msgStatus:
		o.Status(b)
	}
}

func (h *heldOutput) Stdout(b []byte) { h.put(msgStdout, b) }
func (h *heldOutput) Stderr(b []byte) { h.put(msgStderr, b) }
func (h *heldOutput) Status(b []byte) { h.put(msgStatus, b) }

type discard struct{}

func (discard) Stdout([]byte) {}
func (discard) Stderr([]byte) {}
func (discard) Status([]byte) {}
