package stream

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// Log is the Source of a log that is read without waiting: read returns
// the events after an offset, a channel closed when more come, and whether
// the log has ended (nothing comes after what it returned); seq is an
// event's offset. The first events are those after after (0: all there
// are), as a client that resumes after event after wants them. A log
// bounds itself (a live process keeps its latest output): a batch is what
// it holds after the offset.
func Log[E any](read func(after uint64) ([]E, <-chan struct{}, bool), seq func(E) uint64, after uint64) Source[E] {
	return &logSource[E]{read: read, seq: seq, after: after}
}

type logSource[E any] struct {
	read  func(uint64) ([]E, <-chan struct{}, bool)
	seq   func(E) uint64
	after uint64
}

func (l *logSource[E]) Next(ctx context.Context, wait time.Duration) ([]E, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		evs, more, ended := l.read(l.after)
		for _, ev := range evs {
			l.after = max(l.after, l.seq(ev))
		}
		switch {
		case len(evs) > 0:
			return evs, nil
		case ended:
			return nil, io.EOF
		}
		select {
		case <-more:
		case <-timer.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// ErrClosed is Push's answer once the queue is closed.
var ErrClosed = errors.New("stream: the queue is closed")

// Queue is the Source of events a producer pushes: it holds a bounded
// number of them, so a slow client holds the producer up (Push waits)
// instead of memory. One producer pushes, then closes it; one follower
// reads it.
type Queue[E any] struct {
	ch   chan E
	done chan struct{} // closed by Close
	once sync.Once
	err  error // what Next returns once drained; set before done closes
}

// NewQueue returns an empty queue that holds at most size events (at
// least one).
func NewQueue[E any](size int) *Queue[E] {
	return &Queue[E]{ch: make(chan E, max(size, 1)), done: make(chan struct{})}
}

// Push adds e, waiting while the queue is full. It returns ctx's error
// when ctx ends first and ErrClosed once the queue is closed; e is then
// dropped.
func (q *Queue[E]) Push(ctx context.Context, e E) error {
	select {
	case <-q.done:
		return ErrClosed
	default:
	}
	select {
	case q.ch <- e:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-q.done:
		return ErrClosed
	}
}

// Close ends the queue once its producer is done: the follower gets what
// it holds, then err (io.EOF when err is nil). Only the first call counts;
// it must come after the producer's last Push.
func (q *Queue[E]) Close(err error) {
	q.once.Do(func() {
		if err == nil {
			err = io.EOF
		}
		q.err = err
		close(q.done)
	})
}

// Next implements Source.
func (q *Queue[E]) Next(ctx context.Context, wait time.Duration) ([]E, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var out []E
	select {
	case e := <-q.ch:
		out = append(out, e)
	case <-q.done:
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// What else is there, without waiting; at most a queue's worth.
more:
	for len(out) < cap(q.ch) {
		select {
		case e := <-q.ch:
			out = append(out, e)
		default:
			break more
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	return nil, q.err // done is closed: every push came before
}

// Produce runs produce in a goroutine of its own and follows what it
// emits (through a Queue of size events) to the client with Follow. It
// returns once produce has returned: with produce's error (nil when it
// returned nil, after every event it emitted went out), or with the
// stream's (ctx ended, a write failed), which cancels produce's context
// first. emit may wait (the queue is full); it drops the event once
// produce's context has ended.
func Produce[E any](ctx context.Context, size int, produce func(ctx context.Context, emit func(E)) error,
	w Wire, send func(E) error, every time.Duration) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	q := NewQueue[E](size)
	done := make(chan struct{})
	var perr error
	go func() {
		defer close(done)
		perr = produce(pctx, func(e E) { _ = q.Push(pctx, e) })
		q.Close(perr)
	}()
	err := Follow(ctx, q, w, send, every)
	cancel()
	<-done
	if err == nil {
		return perr // nil, or an io.EOF of produce's own, which Follow took for the end
	}
	return err
}
