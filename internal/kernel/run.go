package kernel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/sandbox"
)

// MaxEventSize bounds one event from a context (a figure's PNG, base64);
// a larger one is dropped and a stderr event says so.
const MaxEventSize = 32 << 20

// MaxPending bounds the output a run holds that its caller has not taken
// yet; output beyond it is dropped (results, errors and the end never are)
// and a stderr event says so.
const MaxPending = 64 << 20

// cellIDs numbers cells across contexts, so that a context's events for
// one cell are never taken for another's.
var cellIDs atomic.Uint64

// wireEvent is an event as the runner writes it.
type wireEvent struct {
	sandbox.ContextEvent
	Cell uint64 `json:"cell"`
}

// Run runs code as the next cell of the context id and calls emit with its
// events as they come, in order, from the goroutine that called Run; the
// last is end_of_execution. A cell that fails, is interrupted or times out
// still ends normally: its error is an event, and Run returns nil. Run
// returns an error only when the cell could not run or finish: ErrNotFound
// (also when the context is deleted meanwhile), ErrInvalid (code larger
// than MaxCodeSize), ctx's error (the cell is then interrupted), or the
// sandbox's agent lost. Runs on one context wait for their turn.
//
// A timeout above zero bounds the cell: past it, the cell is interrupted
// and its error is a TimeoutError; if it does not stop within the grace
// period, its context is restarted (its state is lost) and the error says
// so.
func (k *Contexts) Run(ctx context.Context, id, code string, timeout time.Duration, emit func(sandbox.ContextEvent)) error {
	if err := CheckCode(code); err != nil {
		return err
	}
	audit.Record(ctx, audit.Event{Action: audit.ContextRun, SandboxID: k.o.Sandbox, Fields: map[string]string{"context": id,
		"code_sha256": audit.SHA256([]byte(code)), "code_bytes": strconv.Itoa(len(code))}})
	c, err := k.get(id)
	if err != nil {
		return err
	}
	if err := c.take(ctx); err != nil {
		return err
	}
	defer c.release()
	inst, err := c.current()
	if err != nil {
		return err
	}
	if inst == nil || gone(inst.proc) {
		// The process ended between cells (a thread of its own called
		// exit, the OOM killer), or did not come back with its sandbox's
		// restore (nil): a fresh one runs this cell.
		why := "had ended since its last cell"
		if inst == nil {
			why = "did not come back when its sandbox was restored"
		}
		if inst, err = k.renew(ctx, c, inst); err != nil {
			return err
		}
		emit(sandbox.ContextEvent{Type: sandbox.ContextEventError, Name: ErrorContextRestarted,
			Value: "the context's process " + why + "; it was restarted and its state is lost"})
	}
	r := &run{k: k, c: c, inst: inst, emit: emit, timeout: timeout}
	return r.do(ctx, code)
}

// gone reports whether p has ended.
func gone(p *agent.Process) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

// run is one cell in progress.
type run struct {
	k       *Contexts
	c       *codeContext
	inst    *instance
	emit    func(sandbox.ContextEvent)
	timeout time.Duration

	timedOut bool // interrupted for its timeout
	sawError bool // the runner reported an error
}

func (r *run) do(ctx context.Context, code string) error {
	cell := cellIDs.Add(1)
	s := r.inst.out.begin(cell)
	defer r.inst.out.end(s)
	if err := r.inst.proc.WriteStdin(r.c.cr.ContextRequest(cell, code)); err != nil {
		return fmt.Errorf("send cell to context %s: %w", r.c.info.ID, err)
	}
	var timeout, grace, rawWait <-chan time.Time
	if r.timeout > 0 {
		t := time.NewTimer(r.timeout)
		defer t.Stop()
		timeout = t.C
	}
	cancelled, ended, waited := false, false, false
	done := ctx.Done()
	for {
		ended = r.deliver(s, !cancelled) || ended
		if ended && (waited || s.rawEnded()) {
			if cancelled {
				return ctx.Err()
			}
			r.end()
			return nil
		}
		if ended && rawWait == nil {
			rawWait = time.After(rawEndWait)
		}
		select {
		case <-s.notify:
		case <-rawWait:
			waited = true
		case <-r.inst.proc.Done():
			// Whatever it sent before it ended is delivered first.
			ended = r.deliver(s, !cancelled) || ended
			switch {
			case cancelled:
				return ctx.Err()
			case ended:
				r.end()
				return nil
			}
			return r.died()
		case <-timeout:
			timeout = nil
			r.timedOut = true
			grace = r.interrupt(ctx)
		case <-grace:
			return r.stuck(cancelled, ctx)
		case <-done:
			done = nil
			cancelled = true
			timeout = nil
			grace = r.interrupt(context.Background())
		}
	}
}

// interrupt sends the cell SIGINT and returns when its grace ends.
func (r *run) interrupt(ctx context.Context) <-chan time.Time {
	_ = r.inst.proc.Signal(ctx, syscall.SIGINT)
	return time.After(r.k.o.Grace)
}

// deliver passes on the events the runner sent so far but the end (all of
// them when forward, else drops them), and reports whether the end was
// among them.
func (r *run) deliver(s *sink, forward bool) bool {
	ended := false
	for _, ev := range s.take() {
		if ev.Type == sandbox.ContextEventEndOfExecution {
			ended = true
			continue
		}
		if !forward {
			continue
		}
		if ev.Type == sandbox.ContextEventError {
			r.sawError = true
			if r.timedOut && ev.Name == "KeyboardInterrupt" {
				tb := ev.Traceback
				ev = r.timeoutError("was interrupted")
				ev.Traceback = tb
			}
		}
		r.emit(ev)
	}
	return ended
}

// end sends the cell's last event (after a timeout error, if the cell
// outlived its timeout without reporting one).
func (r *run) end() {
	if r.timedOut && !r.sawError {
		r.emit(r.timeoutError("was interrupted; it then ended without an error"))
	}
	r.emit(sandbox.ContextEvent{Type: sandbox.ContextEventEndOfExecution})
}

func (r *run) timeoutError(what string) sandbox.ContextEvent {
	return sandbox.ContextEvent{Type: sandbox.ContextEventError, Name: ErrorTimeout, Value: fmt.Sprintf("the cell ran past its timeout of %s and %s", r.timeout, what)}
}

// died ends a cell whose context's process ended: the context restarts.
func (r *run) died() error {
	st, err := r.inst.proc.Wait(context.Background())
	if err != nil {
		return fmt.Errorf("context %s: %w", r.c.info.ID, err)
	}
	how := fmt.Sprintf("exit status %d", st.Code)
	if st.Signal != 0 {
		how = fmt.Sprintf("signal %d (%s)", st.Signal, syscall.Signal(st.Signal))
	}
	if _, err := r.k.renew(context.Background(), r.c, r.inst); err != nil {
		return err
	}
	r.emit(sandbox.ContextEvent{Type: sandbox.ContextEventError, Name: ErrorContextRestarted,
		Value: "the context's process ended (" + how + ") while the cell ran; it was restarted and its state is lost"})
	r.emit(sandbox.ContextEvent{Type: sandbox.ContextEventEndOfExecution})
	return nil
}

// stuck ends a cell that did not stop within the grace after an interrupt:
// its context restarts.
func (r *run) stuck(cancelled bool, ctx context.Context) error {
	if _, err := r.k.renew(context.Background(), r.c, r.inst); err != nil {
		return err
	}
	if cancelled {
		return ctx.Err()
	}
	r.emit(r.timeoutError(fmt.Sprintf("did not stop within %s of an interrupt; the context was restarted and its state is lost", r.k.o.Grace)))
	r.emit(sandbox.ContextEvent{Type: sandbox.ContextEventEndOfExecution})
	return nil
}

// output receives a context process's streams: events on its status fd,
// raw stdout and stderr, and hands those of the running cell to its sink.
// The agent's client calls it from one goroutine.
type output struct {
	line     []byte // status bytes after the last newline
	skipping bool   // the rest of an oversized event is being dropped
	stdout   rawStream
	stderr   rawStream

	mu   sync.Mutex
	sink *sink
}

// sink is what one cell has produced and its run has not taken yet.
type sink struct {
	cell   uint64
	notify chan struct{}

	mu      sync.Mutex
	events  []sandbox.ContextEvent
	pending int
	dropped bool
	// marked counts the raw streams whose end marker for this cell came.
	marked int
}

func (o *output) begin(cell uint64) *sink {
	s := &sink{cell: cell, notify: make(chan struct{}, 1)}
	o.mu.Lock()
	o.sink = s
	o.mu.Unlock()
	return s
}

func (o *output) end(s *sink) {
	o.mu.Lock()
	if o.sink == s {
		o.sink = nil
	}
	o.mu.Unlock()
}

func (o *output) current() *sink {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sink
}

func (o *output) Stdout(p []byte) { o.raw(&o.stdout, sandbox.ContextEventStdout, p) }
func (o *output) Stderr(p []byte) { o.raw(&o.stderr, sandbox.ContextEventStderr, p) }

// raw passes on output written to the process's own stdout or stderr
// (subprocesses', mostly) during a cell, up to the cell's end marker;
// between cells it is dropped.
func (o *output) raw(rs *rawStream, typ string, p []byte) {
	rs.split(p, func(text string) {
		if s := o.current(); s != nil && text != "" {
			s.add(sandbox.ContextEvent{Type: typ, Text: text})
		}
	}, func(cell uint64) {
		if s := o.current(); s != nil && s.cell == cell {
			s.mark()
		}
	})
}

// Status splits the event stream into lines, one event each.
func (o *output) Status(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !o.skipping {
				o.line = append(o.line, p...)
				if len(o.line) > MaxEventSize {
					o.line, o.skipping = nil, true
					o.oversized()
				}
			}
			return
		}
		if !o.skipping {
			o.line = append(o.line, p[:i]...)
			o.event(o.line)
		}
		o.line, o.skipping = o.line[:0], false
		p = p[i+1:]
	}
}

// event hands one event line to the running cell's sink, if it is that
// cell's and well formed.
func (o *output) event(line []byte) {
	var ev wireEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return
	}
	switch ev.Type {
	case sandbox.ContextEventStdout, sandbox.ContextEventStderr, sandbox.ContextEventResult, sandbox.ContextEventError, sandbox.ContextEventNumberOfExecutions, sandbox.ContextEventEndOfExecution:
	default:
		return
	}
	if s := o.current(); s != nil && s.cell == ev.Cell {
		s.add(ev.ContextEvent)
	}
}

func (o *output) oversized() {
	if s := o.current(); s != nil {
		s.add(sandbox.ContextEvent{Type: sandbox.ContextEventStderr, Text: fmt.Sprintf("[corral: an output of more than %d MiB was dropped]\n", MaxEventSize>>20)})
	}
}

// add queues ev for the run; output past MaxPending is dropped, with one
// note.
func (s *sink) add(ev sandbox.ContextEvent) {
	s.mu.Lock()
	size := len(ev.Text)
	if ev.Type == sandbox.ContextEventStdout || ev.Type == sandbox.ContextEventStderr {
		if s.pending+size > MaxPending {
			if !s.dropped {
				s.dropped = true
				s.events = append(s.events, sandbox.ContextEvent{Type: sandbox.ContextEventStderr, Text: "[corral: output dropped: the caller did not keep up]\n"})
			}
			s.mu.Unlock()
			return
		}
	}
	for _, v := range ev.Data {
		size += len(v)
	}
	s.pending += size
	s.events = append(s.events, ev)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// mark notes a raw stream's end marker.
func (s *sink) mark() {
	s.mu.Lock()
	s.marked++
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// rawEnded reports whether both raw streams' end markers came.
func (s *sink) rawEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.marked >= 2
}

// take returns the queued events.
func (s *sink) take() []sandbox.ContextEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.events
	s.events, s.pending, s.dropped = nil, 0, false
	return evs
}

// rawEndMark starts the marker a context writes to its raw stdout and
// stderr at the end of each cell: the prefix, the cell's id in decimal, a
// NUL. The runners write it themselves (python_context.py's RAW_END_MARK,
// which TestPythonRawEndMark checks, and javascript_context.js's).
var rawEndMark = []byte("\x00corral-end:")

// maxRawEndMark is the longest marker (a uint64 in decimal).
const maxRawEndMark = 14 + 20 + 1

// rawEndWait bounds the wait for a cell's raw end markers after its end
// event (a cell that closed its stdout writes none).
const rawEndWait = time.Second

// rawStream splits a raw output stream into text and end markers. It holds
// back what may be the start of a marker, or of a UTF-8 sequence, until the
// next chunk says.
type rawStream struct{ held []byte }

// split calls text with p's text and mark with each marker's cell, in
// order.
func (rs *rawStream) split(p []byte, text func(string), mark func(cell uint64)) {
	b := append(rs.held, p...)
	rs.held = nil
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			cut := completeUTF8(b)
			text(string(b[:cut]))
			rs.held = append(rs.held, b[cut:]...)
			return
		}
		text(string(b[:i]))
		b = b[i:]
		n, cell, ok := parseRawEndMark(b)
		switch {
		case ok:
			mark(cell)
			b = b[n:]
		case n == 0: // too short to tell
			rs.held = append(rs.held, b...)
			return
		default: // a NUL of the program's own
			text(string(b[:1]))
			b = b[1:]
		}
	}
}

// parseRawEndMark reads a marker at the start of b (which starts with a
// NUL): its length and cell; n == 0 when b is too short to tell, !ok with
// n > 0 when b does not start with one.
func parseRawEndMark(b []byte) (n int, cell uint64, ok bool) {
	if len(b) < len(rawEndMark) {
		if bytes.HasPrefix(rawEndMark, b) {
			return 0, 0, false
		}
		return 1, 0, false
	}
	if !bytes.HasPrefix(b, rawEndMark) {
		return 1, 0, false
	}
	j := bytes.IndexByte(b[len(rawEndMark):], 0)
	if j < 0 {
		if len(b) < maxRawEndMark {
			return 0, 0, false
		}
		return 1, 0, false
	}
	cell, err := strconv.ParseUint(string(b[len(rawEndMark):len(rawEndMark)+j]), 10, 64)
	if err != nil {
		return 1, 0, false
	}
	return len(rawEndMark) + j + 1, cell, true
}

// completeUTF8 returns the length of b without a trailing incomplete UTF-8
// sequence.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

var _ agent.Output = (*output)(nil)
