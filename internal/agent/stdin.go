//go:build linux

package agent

import (
	"fmt"
	"sync"
	"time"
)

// Stdin flow control, the agent's side. The frame loop never writes to a
// process: a program that stops reading its stdin would block the write,
// and with it every frame behind it (signals, resizes, other processes'
// stdin, file operations). Each process with a stdin has a queue and a
// writer goroutine of its own instead: the frame loop queues a msgStdin
// payload, or msgCloseStdin's close behind the data before it, and goes on;
// the writer writes the queue to the process in order and acknowledges
// what the process's stdin took (a pipe's or a terminal's buffer, as
// write(2) counts) with msgStdinAck: each payload, and each stdinAckStep
// of one that the process takes slowly. The host keeps at most
// StdinWindow bytes unacknowledged per process (client_stdin.go), which
// bounds the queue; a host that sends more finds the process's stdin ended
// (KindLimit), the agent's memory unchanged.
//
// A write that fails (EPIPE: the process closed its stdin, or is ending)
// ends the stdin: the agent tells the host with msgStdinEnd and drops what
// is queued and what comes later. When the process ends, finish stops the
// writer, closing the stdin wakes a write in progress, and the queue is
// dropped: the host learns of the end from msgExit, which comes after every
// acknowledgement.

// stdinQueue is what the host sent for a process's stdin and the writer
// has not written yet.
type stdinQueue struct {
	mu     sync.Mutex
	chunks [][]byte
	// size counts the bytes of chunks and of the chunk being written.
	size int
	// closing: the host closed the stdin; the writer closes it after
	// chunks.
	closing bool
	// stopped: nothing more is written (the stdin was closed or broke,
	// or the process ended); what comes is dropped.
	stopped bool

	wake chan struct{}
	done chan struct{} // closed when the writer has returned
}

func newStdinQueue() *stdinQueue {
	return &stdinQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (q *stdinQueue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// maxStdinQueued is what the agent holds for one process's stdin: a window,
// and another for a host client that took the process up again after a
// restore (resume_client.go) and starts with a full window while the old
// one's bytes may still be queued.
const maxStdinQueued = 2 * StdinWindow

// push queues a copy of b (the frame loop reuses its buffer).
func (q *stdinQueue) push(b []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.stopped || q.closing:
		return nil // dropped: the host was told, or closed it itself
	case q.size+len(b) > maxStdinQueued:
		return refuse(KindLimit, "stdin: more than %d bytes unacknowledged", maxStdinQueued)
	}
	q.chunks = append(q.chunks, append([]byte(nil), b...))
	q.size += len(b)
	q.poke()
	return nil
}

// close queues the stdin's close behind the data queued.
func (q *stdinQueue) close() {
	q.mu.Lock()
	q.closing = true
	q.mu.Unlock()
	q.poke()
}

// stop ends the queue and reports whether this call did.
func (q *stdinQueue) stop() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return false
	}
	q.stopped, q.chunks, q.size = true, nil, 0
	q.poke()
	return true
}

// next waits for the writer's next step: a chunk to write, or (nil, true)
// to close the stdin, or (nil, false) to return.
func (q *stdinQueue) next() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.chunks) == 0 && !q.closing && !q.stopped {
		q.mu.Unlock()
		<-q.wake
		q.mu.Lock()
	}
	switch {
	case q.stopped:
		return nil, false
	case len(q.chunks) == 0:
		q.stopped = true
		return nil, true
	}
	b := q.chunks[0]
	q.chunks[0] = nil
	q.chunks = q.chunks[1:]
	return b, false
}

// written takes a written chunk off the queue's size; false: the queue was
// stopped meanwhile.
func (q *stdinQueue) written(n int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return false
	}
	q.size -= n
	return true
}

// writeStdin is p's writer: it writes what the host sends to p's stdin, in
// order, until the stdin is closed or breaks or p ends.
func (a *Agent) writeStdin(p *proc) {
	q := p.in
	defer close(q.done)
	for {
		b, closeIt := q.next()
		if b == nil {
			if closeIt {
				if p.pty != nil {
					p.typeEOF()
				} else {
					p.stdin.Close()
				}
			}
			return
		}
		// Written in steps; what is written is acknowledged at the end
		// of the payload, or as soon as a step completes a while after the
		// last acknowledgement: a process that reads, however slowly,
		// returns credit every step, while one that reads fast costs one
		// acknowledgement per payload.
		var unacked int
		last := time.Now()
		for len(b) > 0 {
			k := min(len(b), stdinAckStep)
			if _, err := p.stdin.Write(b[:k]); err != nil {
				a.stdinBroke(p, fmt.Errorf("stdin of process %d: %w", p.id, err))
				return
			}
			if !q.written(k) {
				return
			}
			b, unacked = b[k:], unacked+k
			if len(b) == 0 || time.Since(last) >= stdinAckAfter {
				a.sendJSON(msgStdinAck, p.id, stdinAck{Bytes: unacked})
				unacked, last = 0, time.Now()
			}
		}
	}
}

// stdinAckStep is the most the writer writes to a process at once, and
// stdinAckAfter how long after its last acknowledgement it acknowledges
// each step written: a process that reads slowly still returns credit,
// and a host that bounds how long it waits for a process that reads
// nothing (WriteStdinWithin) tells the two apart. A process that takes
// under 16 KiB in that bound counts as not reading.
const (
	stdinAckStep  = 16 << 10
	stdinAckAfter = 5 * time.Millisecond
)

// stdinBroke ends p's stdin for err and tells the host, unless p's end (or
// an earlier failure) stopped the queue first.
func (a *Agent) stdinBroke(p *proc, err error) {
	if !p.in.stop() {
		return
	}
	if p.pty == nil {
		// Nothing more can be written; a write in progress returns.
		p.stdin.Close()
	}
	a.sendJSON(msgStdinEnd, p.id, errorReply{Kind: kindOf(err), Message: err.Error()})
}

// endStdin stops p's writer when p has ended (its output drained), closes
// its stdin, which returns a write in progress, and waits for the writer.
func (p *proc) endStdin() {
	if p.in != nil {
		p.in.stop()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
	if p.in != nil {
		<-p.in.done
	}
}

func (a *Agent) onStdin(f frame) {
	p := a.byID(f.id)
	switch {
	case p == nil:
		return // it ended: msgExit tells the host
	case p.in == nil:
		a.sendJSON(msgStdinEnd, f.id, errorReply{Kind: KindInvalid, Message: fmt.Sprintf("stdin: process %d was started without one", f.id)})
	case f.typ == msgCloseStdin:
		p.in.close()
	default:
		if err := p.in.push(f.payload); err != nil {
			a.stdinBroke(p, err)
		}
	}
}
