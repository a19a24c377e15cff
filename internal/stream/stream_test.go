package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// event is a test event: its offset and a name.
type event struct {
	seq  uint64
	name string
}

func seqOf(e event) uint64 { return e.seq }

// memLog is a log read without waiting, as a live process's output is.
type memLog struct {
	mu      sync.Mutex
	evs     []event
	ended   bool
	changed chan struct{}
}

func newLog(names ...string) *memLog {
	l := &memLog{changed: make(chan struct{})}
	for _, n := range names {
		l.add(n)
	}
	return l
}

func (l *memLog) add(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, event{seq: uint64(len(l.evs) + 1), name: name})
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *memLog) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *memLog) read(after uint64) ([]event, <-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []event
	for _, e := range l.evs {
		if e.seq > after {
			out = append(out, e)
		}
	}
	return out, l.changed, l.ended
}

// wire records what a stream wrote: event names, "ka" for keep-alives,
// "|" for flushes; onSend, when set, runs before an event is recorded and
// may fail the write.
type wire struct {
	mu     sync.Mutex
	got    []string
	onSend func(e event) error
}

func (w *wire) KeepAlive() error { w.add("ka"); return nil }
func (w *wire) Flush() error     { w.add("|"); return nil }

func (w *wire) send(e event) error {
	if len(w.written()) > 10000 {
		return errors.New("a runaway stream") // a bug should fail, not fill memory
	}
	if w.onSend != nil {
		if err := w.onSend(e); err != nil {
			return err
		}
	}
	w.add(e.name)
	return nil
}

func (w *wire) add(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, s)
}

// written is what went out: the names, keep-alives and flushes.
func (w *wire) written() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// events is what went out without flushes and keep-alives.
func (w *wire) events() []string {
	return slices.DeleteFunc(w.written(), func(s string) bool { return s == "|" || s == "ka" })
}

// TestLogOffsets: a stream resumed after an event gets what came after
// it, in one flushed batch, and ends with an ended log; one resumed after
// the last event of an ended log gets nothing.
func TestLogOffsets(t *testing.T) {
	for _, c := range []struct {
		after uint64
		want  []string
	}{
		{0, []string{"a", "b", "c", "d", "|"}},
		{2, []string{"c", "d", "|"}},
		{4, nil},
		{9, nil},
	} {
		l := newLog("a", "b", "c", "d")
		l.end()
		w := &wire{}
		if err := Follow(t.Context(), Log(l.read, seqOf, c.after), w, w.send, time.Hour); err != nil {
			t.Fatalf("after %d: %v", c.after, err)
		}
		if got := w.written(); !slices.Equal(got, c.want) {
			t.Errorf("after %d: wrote %q, want %q", c.after, got, c.want)
		}
	}
}

// TestLogFollows: what is added while a stream follows the log goes out
// in order, each added event once, until the log ends.
func TestLogFollows(t *testing.T) {
	l := newLog("first")
	w := &wire{}
	seen := make(chan string, 100)
	w.onSend = func(e event) error { seen <- e.name; return nil }
	done := make(chan error, 1)
	go func() { done <- Follow(t.Context(), Log(l.read, seqOf, 0), w, w.send, time.Hour) }()
	var want []string
	want = append(want, "first")
	if got := <-seen; got != "first" {
		t.Fatalf("first event %q", got)
	}
	for i := range 20 {
		n := fmt.Sprint(i)
		l.add(n)
		want = append(want, n)
		if got := <-seen; got != n {
			t.Fatalf("event %q, want %q", got, n)
		}
	}
	l.end()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := w.events(); !slices.Equal(got, want) {
		t.Errorf("wrote %q, want %q", got, want)
	}
}

// TestKeepAlive: a silent stream gets keep-alives, flushed; a stream that
// never waits as long as its interval gets none.
func TestKeepAlive(t *testing.T) {
	q := NewQueue[event](4)
	w := &wire{}
	done := make(chan error, 1)
	go func() { done <- Follow(t.Context(), q, w, w.send, 5*time.Millisecond) }()
	deadline := time.After(10 * time.Second)
	for kas := 0; kas < 2; {
		select {
		case <-deadline:
			t.Fatalf("no keep-alives from a silent stream: %q", w.written())
		case <-time.After(time.Millisecond):
		}
		kas = len(slices.DeleteFunc(w.written(), func(s string) bool { return s != "ka" }))
	}
	if err := q.Push(t.Context(), event{1, "last"}); err != nil {
		t.Fatal(err)
	}
	q.Close(nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := w.written()
	if got[0] != "ka" || got[1] != "|" || !slices.Equal(got[len(got)-2:], []string{"last", "|"}) {
		t.Errorf("wrote %q: want keep-alives, each flushed, then the event", got)
	}

	l := newLog("a", "b")
	l.end()
	w = &wire{}
	if err := Follow(t.Context(), Log(l.read, seqOf, 0), w, w.send, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := w.written(); slices.Contains(got, "ka") {
		t.Errorf("a keep-alive in a stream that was never silent: %q", got)
	}
}

// TestSlowClient: a client that does not read holds the producer up: no
// more than the queue's size waits besides the batch being written;
// once it reads, everything comes, in order.
func TestSlowClient(t *testing.T) {
	const size, total = 4, 200
	var pushed, held atomic.Int64
	produced := make(chan struct{})
	w := &wire{}
	w.onSend = func(e event) error {
		if e.seq == 1 {
			// The client stalls on the first event: the producer gets
			// far enough to show whether anything bounds it.
			select {
			case <-produced:
			case <-time.After(200 * time.Millisecond):
			}
			held.Store(pushed.Load())
		}
		return nil
	}
	err := Produce(t.Context(), size, func(ctx context.Context, emit func(event)) error {
		defer close(produced)
		for i := range total {
			emit(event{seq: uint64(i + 1), name: fmt.Sprint(i)})
			pushed.Add(1)
		}
		return nil
	}, w, w.send, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// A batch taken from the queue, and a queue full behind it.
	if n := held.Load(); n > 2*size {
		t.Errorf("%d events were pushed while the client read none; at most %d may wait", n, 2*size)
	}
	got := w.events()
	if len(got) != total {
		t.Fatalf("%d events, want %d", len(got), total)
	}
	for i, n := range got {
		if n != fmt.Sprint(i) {
			t.Fatalf("event %d is %q", i, n)
		}
	}
}

// TestCancel: a stream ends when its context does, while it waits for a
// source and while a producer waits for room; Produce returns only once
// the producer has.
func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	l := newLog()
	done := make(chan error, 1)
	w := &wire{}
	go func() { done <- Follow(ctx, Log(l.read, seqOf, 0), w, w.send, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Follow after cancel: %v", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	var producerDone atomic.Bool
	w = &wire{}
	w.onSend = func(event) error { cancel(); return nil } // the client leaves at the first event
	err := Produce(ctx, 1, func(ctx context.Context, emit func(event)) error {
		defer producerDone.Store(true)
		for i := 0; ; i++ {
			emit(event{uint64(i + 1), "x"})
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}, w, w.send, time.Hour)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Produce after cancel: %v", err)
	}
	if !producerDone.Load() {
		t.Error("Produce returned before its producer")
	}
}

// TestWriteFails: a failed write ends the stream with an error wrapping
// ErrWrite and the write's, and stops the producer.
func TestWriteFails(t *testing.T) {
	gone := errors.New("connection reset")
	w := &wire{}
	w.onSend = func(e event) error {
		if e.seq == 3 {
			return gone
		}
		return nil
	}
	var stopped atomic.Bool
	err := Produce(t.Context(), 2, func(ctx context.Context, emit func(event)) error {
		for i := 0; ctx.Err() == nil; i++ {
			emit(event{uint64(i + 1), fmt.Sprint(i)})
		}
		stopped.Store(true)
		return ctx.Err()
	}, w, w.send, time.Hour)
	if !errors.Is(err, ErrWrite) || !errors.Is(err, gone) {
		t.Errorf("Produce: %v, want ErrWrite and the write's error", err)
	}
	if !stopped.Load() {
		t.Error("the producer did not see its context end")
	}
	if got := w.events(); !slices.Equal(got, []string{"0", "1"}) {
		t.Errorf("wrote %q", got)
	}
}

// TestProducerFails: a producer's error comes after every event it
// emitted went out, and is returned as it is (an io.EOF of its own too);
// one that fails at once leaves nothing written.
func TestProducerFails(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		emit int
		err  error
	}{{2, boom}, {0, boom}, {1, io.EOF}, {3, nil}} {
		w := &wire{}
		err := Produce(t.Context(), 8, func(ctx context.Context, emit func(event)) error {
			for i := range c.emit {
				emit(event{uint64(i + 1), fmt.Sprint(i)})
			}
			return c.err
		}, w, w.send, time.Hour)
		if err != c.err { // the very value
			t.Errorf("%d events then %v: Produce returned %v", c.emit, c.err, err)
		}
		if got := w.events(); len(got) != c.emit {
			t.Errorf("%d events then %v: wrote %q", c.emit, c.err, got)
		}
		if c.emit == 0 && len(w.written()) != 0 {
			t.Errorf("a producer that failed at once: wrote %q", w.written())
		}
	}
}

// TestQueueClosed: a closed queue refuses pushes and ends with its
// producer's error, or io.EOF.
func TestQueueClosed(t *testing.T) {
	q := NewQueue[event](2)
	if err := q.Push(t.Context(), event{1, "a"}); err != nil {
		t.Fatal(err)
	}
	q.Close(nil)
	q.Close(errors.New("ignored: the first Close counts"))
	if err := q.Push(t.Context(), event{2, "b"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Push after Close: %v", err)
	}
	evs, err := q.Next(t.Context(), time.Hour)
	if err != nil || len(evs) != 1 || evs[0].name != "a" {
		t.Fatalf("Next: %v, %v", evs, err)
	}
	if _, err := q.Next(t.Context(), time.Hour); err != io.EOF { // io.EOF itself, by contract
		t.Errorf("Next once drained: %v, want io.EOF", err)
	}
	// A full queue's Push gives up with its context.
	q = NewQueue[event](1)
	_ = q.Push(t.Context(), event{1, "a"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := q.Push(ctx, event{2, "b"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Push on a full queue after cancel: %v", err)
	}
}
