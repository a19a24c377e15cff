package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Stdin flow control, the host's side. A process's stdin is credit-based:
// the host sends at most StdinWindow bytes the agent has not acknowledged
// (msgStdinAck, sent as the process's stdin takes them: stdin.go), so a
// process that stops reading costs the agent a window of memory and stalls
// only its own writers, never the control stream. Writes to one process are
// serialised, each call's bytes contiguous, in the order the calls took
// their turn; nothing is dropped or reordered while the process reads. A
// writer may bound how long it waits for a process that takes nothing
// (WriteStdinWithin): the agent acknowledges at most stdinAckStep bytes at
// a time (stdin.go), so a process that reads, however slowly, shows it.

// StdinWindow is how many bytes of a process's stdin the host sends ahead
// of the agent's acknowledgements, and what the agent holds at most.
const StdinWindow = 256 << 10

// stdinChunk caps one msgStdin frame; the agent acknowledges each frame
// once written, so smaller frames return credit sooner.
const stdinChunk = 128 << 10

// stdinAck is msgStdinAck's payload.
type stdinAck struct {
	Bytes int `json:"bytes"`
}

var (
	// ErrStdinEnded: the process takes no more stdin. It ended, or the
	// agent ended its stdin: the process closed it (the error then also
	// matches syscall.EPIPE, which a process that is ending can show
	// too), or it has none (KindInvalid). What it had not taken is lost.
	ErrStdinEnded = errors.New("the process takes no more stdin")
	// ErrStdinClosed: a write after CloseStdin.
	ErrStdinClosed = errors.New("stdin was closed")
	// ErrNoStdin: the process was started without Stdin or PTY.
	ErrNoStdin = errors.New("the process has no stdin")
	// ErrNotReading: a write with a stall bound (WriteStdinWithin) found
	// the window full and the process taking none of it for that long.
	// What the write sent before stays queued for the process, in order.
	ErrNotReading = errors.New("the process is not reading its stdin")
)

// stdinFlow is a Process's stdin on the host. Its zero value is a stdin
// with a full window.
type stdinFlow struct {
	mu sync.Mutex
	// changed is closed (and replaced) when any field below changes.
	changed chan struct{}
	// unacked counts bytes sent the agent has not acknowledged; since is
	// when the process last took some, or was sent some while it had
	// taken all before.
	unacked int
	since   time.Time
	// busy: a writer has the turn; writers count the calls in progress.
	busy    bool
	writers int
	// closing: CloseStdin was called; closeSent: msgCloseStdin was sent
	// (by CloseStdin, or by the last writer in progress then).
	closing, closeSent bool
	noStdin            bool
	// err is why the stdin ended: ErrStdinEnded wrapped, or the lost
	// stream's error.
	err error
}

// wait releases mu until something changes or ctx ends, or, with stall
// set and the window full, until the window has waited stall since the
// process last took some (the caller checks stalled again). mu is held.
func (f *stdinFlow) wait(ctx context.Context, stall time.Duration) error {
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	ch := f.changed
	var bound <-chan time.Time
	if stall > 0 && f.unacked >= StdinWindow {
		t := time.NewTimer(time.Until(f.since.Add(stall)))
		defer t.Stop()
		bound = t.C
	}
	f.mu.Unlock()
	defer f.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-bound:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stalled reports whether the window is full and the process has taken
// none of it for stall (0: never stalled). mu is held.
func (f *stdinFlow) stalled(stall time.Duration) bool {
	return stall > 0 && f.unacked >= StdinWindow && time.Since(f.since) >= stall
}

// broadcast wakes the waiters. mu is held.
func (f *stdinFlow) broadcast() {
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// ack returns n bytes of credit; an agent cannot return more than was sent.
func (f *stdinFlow) ack(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n <= 0 {
		return
	}
	f.unacked = max(f.unacked-n, 0)
	f.since = time.Now()
	f.broadcast()
}

// fail ends the stdin with err (the first reason stays).
func (f *stdinFlow) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	f.broadcast()
}

// leave ends a write call and reports whether the caller must send the
// close that CloseStdin queued behind it. mu is held.
func (f *stdinFlow) leave() bool {
	f.writers--
	f.broadcast()
	if f.writers == 0 && f.closing && !f.closeSent && f.err == nil {
		f.closeSent = true
		return true
	}
	return false
}

// WriteStdin is WriteStdinContext without a deadline: it blocks until the
// process's stdin has taken all of b but a window, or the stdin ends.
func (p *Process) WriteStdin(b []byte) error {
	_, err := p.WriteStdinContext(context.Background(), b)
	return err
}

// WriteStdinContext sends b to the process's stdin (started with Stdin or
// a PTY). It returns once every byte is sent, which is when the process's
// stdin has taken all but the last StdinWindow bytes: like write(2) to a
// pipe, a nil error does not say the process read them. It blocks while
// the process does not read, until ctx ends (n then says how many bytes
// were sent: a retry sends b[n:]). Calls on one process are served one at
// a time, in turn, each call's bytes together. When the stdin ends first —
// the process ended or closed it (ErrStdinEnded), CloseStdin was called
// (ErrStdinClosed), the sandbox is lost (ErrLost) — it returns that error
// at once.
func (p *Process) WriteStdinContext(ctx context.Context, b []byte) (n int, err error) {
	return p.WriteStdinWithin(ctx, b, 0)
}

// WriteStdinWithin is WriteStdinContext bounded by the process: while it
// waits (for its turn, or for the process to take some of a full window),
// a process that has taken none of its stdin for stall ends the write with
// ErrNotReading. n says how many bytes of b were sent; they stay queued
// for the process (a window at most), which gets them in order if it
// reads. A stall of 0 waits as long as ctx allows.
func (p *Process) WriteStdinWithin(ctx context.Context, b []byte, stall time.Duration) (n int, err error) {
	f := &p.in
	f.mu.Lock()
	switch {
	case f.noStdin:
		err = ErrNoStdin
	case f.err != nil:
		err = f.err
	case f.closing:
		err = ErrStdinClosed
	}
	if err != nil {
		f.mu.Unlock()
		return 0, fmt.Errorf("write stdin of process %d: %w", p.id, err)
	}
	f.writers++
	for f.busy && f.err == nil && err == nil {
		if f.stalled(stall) {
			err = ErrNotReading
			break
		}
		err = f.wait(ctx, stall)
	}
	if err == nil && f.err == nil {
		f.busy = true
		f.broadcast()
		for n < len(b) {
			for f.unacked >= StdinWindow && f.err == nil && err == nil {
				if f.stalled(stall) {
					err = ErrNotReading
					break
				}
				err = f.wait(ctx, stall)
			}
			if err != nil || f.err != nil {
				break
			}
			k := min(len(b)-n, StdinWindow-f.unacked, stdinChunk)
			if f.unacked == 0 {
				f.since = time.Now()
			}
			f.unacked += k
			f.broadcast()
			f.mu.Unlock()
			err = p.c.send(msgStdin, p.id, b[n:n+k])
			f.mu.Lock()
			if err != nil {
				break
			}
			n += k
		}
		f.busy = false
		f.broadcast()
	}
	if err == nil && n < len(b) {
		err = f.err
	}
	sendClose := f.leave()
	f.mu.Unlock()
	if sendClose {
		// A lost stream fails the process as a whole; its error is the
		// close's too.
		_ = p.c.send(msgCloseStdin, p.id, nil)
	}
	if err != nil {
		return n, fmt.Errorf("write stdin of process %d: %w", p.id, err)
	}
	return n, nil
}

// CloseStdin closes the process's stdin once the writes in progress have
// sent their bytes; the process reads end of file after them (on a PTY: the
// terminal's end-of-file character is typed). It does not wait for the
// process to read. Closing twice, or the stdin of a process that has ended,
// is no error; a process without stdin is ErrNoStdin.
func (p *Process) CloseStdin() error {
	f := &p.in
	f.mu.Lock()
	if f.noStdin {
		f.mu.Unlock()
		return fmt.Errorf("close stdin of process %d: %w", p.id, ErrNoStdin)
	}
	if f.closing || f.err != nil {
		f.mu.Unlock()
		return nil
	}
	f.closing = true
	send := f.writers == 0
	f.closeSent = send
	f.broadcast()
	f.mu.Unlock()
	if send {
		return p.c.send(msgCloseStdin, p.id, nil)
	}
	return nil
}

// endStdin ends the stdin of a process that ended (err nil) or was lost.
func (p *Process) endStdin(err error) {
	if err == nil {
		err = fmt.Errorf("%w: it ended", ErrStdinEnded)
	}
	p.in.fail(err)
}

// stdinFrame takes a process's msgStdinAck or msgStdinEnd from the read
// loop.
func (c *Client) stdinFrame(f frame) error {
	c.mu.Lock()
	p := c.procs[f.id]
	c.mu.Unlock()
	if f.typ == msgStdinAck {
		var a stdinAck
		if err := json.Unmarshal(f.payload, &a); err != nil {
			return fmt.Errorf("decode stdin ack: %w", err)
		}
		if p != nil {
			p.in.ack(a.Bytes)
		}
		return nil
	}
	var e errorReply
	if err := json.Unmarshal(f.payload, &e); err != nil {
		return fmt.Errorf("decode stdin end: %w", err)
	}
	if e.Kind == "" {
		e.Kind = KindInternal
	}
	if p != nil {
		p.in.fail(fmt.Errorf("%w: %w", ErrStdinEnded, &RemoteError{Kind: e.Kind, Message: e.Message}))
	}
	return nil
}
