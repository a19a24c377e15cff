package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/corralhq/corral/internal/fault"
)

// Store is where a Writer puts events (store.Store is one).
type Store interface {
	// AppendAudit numbers, links and hashes events (Seal) after their
	// tenants' heads and stores them, in one transaction; it returns them
	// as stored. Events of one tenant keep their order.
	AppendAudit(ctx context.Context, events []Event) ([]Event, error)
}

// Sink receives events once they are stored (with their Seq and Hash).
type Sink interface {
	Ship(ctx context.Context, events []Event) error
	Close() error
}

// WriterConfig configures a Writer; zero fields take the defaults.
type WriterConfig struct {
	// Node names this node in the events it writes.
	Node string
	// Queue bounds the events waiting to be written (default 10000).
	Queue int
	// Batch is the most events one store transaction writes (default 256).
	Batch int
	// Flush is the longest an event waits for its batch to fill (default
	// 200ms).
	Flush time.Duration
	// FullWait is how long Record waits for room in a full queue before it
	// drops the event (default 0: at once). A drop is counted
	// (corral_audit_events_total{result="dropped"}) and logged.
	FullWait time.Duration
	// Retry is the pause between attempts while the store is unavailable
	// (default 1s).
	Retry time.Duration
}

func (c *WriterConfig) defaults() {
	if c.Queue <= 0 {
		c.Queue = 10000
	}
	if c.Batch <= 0 {
		c.Batch = 256
	}
	if c.Flush <= 0 {
		c.Flush = 200 * time.Millisecond
	}
	if c.Retry <= 0 {
		c.Retry = time.Second
	}
}

// Writer is a Recorder that writes events to a Store in batches, from a
// goroutine of its own, and ships what it stored to its sinks. Record
// never blocks the caller beyond FullWait: when the queue stays full the
// event is dropped, counted and logged, never silently lost. While the
// store is unavailable the batch in hand is retried (and the queue fills
// behind it); a batch the store refuses is dropped, counted and logged.
// It is safe for concurrent use; Close stops it.
type Writer struct {
	cfg    WriterConfig
	st     Store
	sinks  []Sink
	log    *slog.Logger
	counts *prometheus.CounterVec // nil: not counted
	now    func() time.Time

	ch   chan Event
	stop chan struct{}
	done chan struct{}

	// closing is held for writing while Close marks the writer closed,
	// and for reading while Record queues, so no event is queued after
	// run drained the queue.
	closing sync.RWMutex
	closed  bool

	mu       sync.Mutex
	dropped  int64     // since the last log line about drops
	loggedAt time.Time // of that line
}

// NewWriter starts a writer to st, shipping to sinks; counts (may be nil)
// takes the results of metrics.AuditEvents.
func NewWriter(st Store, cfg WriterConfig, sinks []Sink, counts *prometheus.CounterVec, log *slog.Logger) *Writer {
	cfg.defaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Writer{cfg: cfg, st: st, sinks: sinks, log: log, counts: counts, now: time.Now,
		ch: make(chan Event, cfg.Queue), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *Writer) count(result string, n int) {
	if w.counts != nil && n > 0 {
		w.counts.WithLabelValues(result).Add(float64(n))
	}
}

// Record implements Recorder: it stamps e with the time and node and
// queues it.
func (w *Writer) Record(e Event) {
	if e.Time.IsZero() {
		e.Time = w.now()
	}
	if e.Node == "" {
		e.Node = w.cfg.Node
	}
	if w.queue(e) {
		return
	}
	w.drop(1, "the audit queue is full, or the writer closed", e)
}

func (w *Writer) queue(e Event) bool {
	w.closing.RLock()
	defer w.closing.RUnlock()
	if w.closed {
		return false
	}
	select {
	case w.ch <- e:
		return true
	default:
	}
	if w.cfg.FullWait <= 0 {
		return false
	}
	t := time.NewTimer(w.cfg.FullWait)
	defer t.Stop()
	select {
	case w.ch <- e:
		return true
	case <-t.C:
		return false
	}
}

// drop counts n lost events and logs them, at most one line per 10 s
// (with the count since the last), so a flood of drops cannot flood the
// log too.
func (w *Writer) drop(n int, why string, e Event) {
	w.count("dropped", n)
	w.mu.Lock()
	w.dropped += int64(n)
	now := w.now()
	if now.Sub(w.loggedAt) < 10*time.Second {
		w.mu.Unlock()
		return
	}
	total := w.dropped
	w.dropped, w.loggedAt = 0, now
	w.mu.Unlock()
	w.log.Error("audit events dropped", "reason", why, "dropped", total, "tenant", e.Tenant, "action", e.Action)
}

func (w *Writer) run() {
	defer close(w.done)
	batch := make([]Event, 0, w.cfg.Batch)
	timer := time.NewTimer(w.cfg.Flush)
	defer timer.Stop()
	for {
		select {
		case e := <-w.ch:
			batch = append(batch, e)
			if len(batch) < w.cfg.Batch {
				continue
			}
		case <-timer.C:
		case <-w.stop:
			// Close: what is queued is written, once more each.
			for {
				select {
				case e := <-w.ch:
					batch = append(batch, e)
					if len(batch) == w.cfg.Batch {
						w.write(batch, false)
						batch = batch[:0]
					}
					continue
				default:
				}
				break
			}
			w.write(batch, false)
			return
		}
		w.write(batch, true)
		batch = batch[:0]
		timer.Reset(w.cfg.Flush)
	}
}

// write stores batch, retrying while the store is unavailable when retry
// is set and the writer is not stopping, then ships it.
func (w *Writer) write(batch []Event, retry bool) {
	if len(batch) == 0 {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		stored, err := w.st.AppendAudit(ctx, batch)
		cancel()
		if err == nil {
			w.count("written", len(stored))
			w.ship(stored)
			return
		}
		if !retry || !retryable(err) {
			w.drop(len(batch), "the store refused them: "+err.Error(), batch[0])
			return
		}
		w.log.Warn("audit: store unavailable; retrying", "events", len(batch), "err", err)
		select {
		case <-time.After(w.cfg.Retry):
		case <-w.stop:
			retry = false
		}
	}
}

// retryable reports an error the store may not give on a retry: anything
// but a refusal of the events' content (store.ErrInvalid's kind).
func retryable(err error) bool {
	return fault.KindOf(err) != fault.InvalidArgument
}

func (w *Writer) ship(events []Event) {
	for _, s := range w.sinks {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.Ship(ctx, events)
		cancel()
		if err != nil {
			w.count("ship_failed", len(events))
			w.log.Error("audit: ship events", "events", len(events), "first_seq", events[0].Seq, "tenant", events[0].Tenant, "err", err)
			continue
		}
		w.count("shipped", len(events))
	}
}

// Close stops taking events, writes those queued, stops the sinks and
// returns once done or when ctx ends.
func (w *Writer) Close(ctx context.Context) error {
	w.closing.Lock()
	if w.closed {
		w.closing.Unlock()
		return nil
	}
	w.closed = true
	w.closing.Unlock()
	close(w.stop)
	select {
	case <-w.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	var errs []error
	for _, s := range w.sinks {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}
