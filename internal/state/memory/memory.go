// Package memory keeps a node's in-flight state in process: the embedded,
// single-node implementation of state.State. Nothing survives a restart and
// nothing is shared with other processes.
package memory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/state"
)

// maxPending bounds the messages a subscriber may fall behind by; past it
// new messages are dropped (and logged), so a subscriber that stops reading
// cannot grow memory without bound.
const maxPending = 1 << 16

// State is an in-process state.State. It is safe for concurrent use. Blocking
// calls wait on channels that writers close, so they wake as soon as there is
// something to return, and they end with ctx or Close. An event log holds at
// most state.MaxEvents events and stays until ExpireEvents (or Close)
// removes it.
type State struct {
	log *slog.Logger

	// wg counts subscription goroutines; Close waits for them.
	wg sync.WaitGroup
	// done is closed by Close; blocked calls and subscriptions watch it.
	done chan struct{}

	mu     sync.Mutex
	closed bool
	logs   map[string]*eventLog
	// waits wakes Events(wait) callers of one execution; Append closes
	// and removes the entry, the next waiter makes a new one.
	waits map[string]*waiters
	subs  map[string]map[*subscriber]struct{}
}

// eventLog is guarded by State.mu.
type eventLog struct {
	// last is the id of the newest event ever appended.
	last   uint64
	events []state.Event
	// gen tells the current expiry timer from a stale one that fired while
	// ExpireEvents was replacing it.
	gen   uint64
	timer *time.Timer
}

type waiters struct {
	ch chan struct{}
	n  int
}

type subscriber struct {
	// wake has room for one token: Notify leaves it after queueing.
	wake chan struct{}

	mu      sync.Mutex
	pending []string
	dropped int
}

// New returns an empty State. log receives warnings (a subscriber too slow
// to keep up); nil discards them.
func New(log *slog.Logger) *State {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &State{
		log:   log,
		done:  make(chan struct{}),
		logs:  make(map[string]*eventLog),
		waits: make(map[string]*waiters),
		subs:  make(map[string]map[*subscriber]struct{}),
	}
}

// Append adds an event to id's log, dropping the oldest past
// state.MaxEvents. It keeps a copy of data.
func (s *State) Append(ctx context.Context, id string, typ string, data []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, fmt.Errorf("append event to %s: %w", id, state.ErrClosed)
	}
	lg := s.logs[id]
	if lg == nil {
		lg = &eventLog{}
		s.logs[id] = lg
	}
	lg.last++
	// Reslicing keeps the backing array at most about twice MaxEvents:
	// append copies only the kept tail when it grows. Clearing the dropped
	// entry lets its data go before that.
	if len(lg.events) == state.MaxEvents {
		lg.events[0] = state.Event{}
		lg.events = lg.events[1:]
	}
	lg.events = append(lg.events, state.Event{ID: lg.last, Type: typ, Data: slices.Clone(data)})
	if w := s.waits[id]; w != nil {
		close(w.ch)
		delete(s.waits, id)
	}
	return lg.last, nil
}

// Events returns id's events after the given id. Their Data is shared with
// the log and must not be modified.
func (s *State) Events(ctx context.Context, id string, after uint64, wait bool) ([]state.Event, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("events of %s: %w", id, state.ErrClosed)
		}
		evs := s.eventsAfter(id, after)
		if len(evs) > 0 || !wait {
			s.mu.Unlock()
			return evs, nil
		}
		w := s.waits[id]
		if w == nil {
			w = &waiters{ch: make(chan struct{})}
			s.waits[id] = w
		}
		w.n++
		s.mu.Unlock()

		var err error
		select {
		case <-w.ch:
		case <-ctx.Done():
			err = fmt.Errorf("events of %s: %w", id, ctx.Err())
		case <-s.done:
			err = fmt.Errorf("events of %s: %w", id, state.ErrClosed)
		}
		s.mu.Lock()
		// The last waiter to give up on an entry no Append closed removes
		// it, so abandoned waits leave nothing behind.
		if w.n--; w.n == 0 && s.waits[id] == w {
			delete(s.waits, id)
		}
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// eventsAfter returns a copy of id's events with ids above after. s.mu is
// held.
func (s *State) eventsAfter(id string, after uint64) []state.Event {
	lg := s.logs[id]
	if lg == nil || len(lg.events) == 0 || after >= lg.last {
		return nil
	}
	// Ids in a log are consecutive, so the first one wanted is found by
	// arithmetic.
	var i uint64
	if first := lg.events[0].ID; after >= first {
		i = after - first + 1
	}
	return slices.Clone(lg.events[i:])
}

// ExpireEvents drops id's log after ttl, replacing any earlier expiry. A
// log that does not exist is left alone; ttl <= 0 drops it now.
func (s *State) ExpireEvents(ctx context.Context, id string, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("expire events of %s: %w", id, state.ErrClosed)
	}
	lg := s.logs[id]
	if lg == nil {
		return nil
	}
	if lg.timer != nil {
		lg.timer.Stop()
		lg.timer = nil
	}
	if ttl <= 0 {
		delete(s.logs, id)
		return nil
	}
	lg.gen++
	gen := lg.gen
	lg.timer = time.AfterFunc(ttl, func() { s.expire(id, lg, gen) })
	return nil
}

func (s *State) expire(id string, lg *eventLog, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && s.logs[id] == lg && lg.gen == gen {
		delete(s.logs, id)
	}
}

// Notify queues msg for every current subscriber of channel.
func (s *State) Notify(ctx context.Context, channel, msg string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("notify %s: %w", channel, state.ErrClosed)
	}
	for sub := range s.subs[channel] {
		sub.mu.Lock()
		if len(sub.pending) >= maxPending {
			sub.dropped++
			sub.mu.Unlock()
			continue
		}
		sub.pending = append(sub.pending, msg)
		sub.mu.Unlock()
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

// Subscribe delivers channel's messages until ctx ends or the State is
// closed, then closes the returned channel. A subscriber that falls more
// than 65536 messages behind loses the newest ones (logged).
func (s *State) Subscribe(ctx context.Context, channel string) (<-chan string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("subscribe %s: %w", channel, state.ErrClosed)
	}
	sub := &subscriber{wake: make(chan struct{}, 1)}
	if s.subs[channel] == nil {
		s.subs[channel] = make(map[*subscriber]struct{})
	}
	s.subs[channel][sub] = struct{}{}
	out := make(chan string)
	s.wg.Add(1)
	go s.deliver(ctx, channel, sub, out)
	return out, nil
}

// deliver moves sub's queued messages to out; it owns out and closes it.
func (s *State) deliver(ctx context.Context, channel string, sub *subscriber, out chan<- string) {
	defer s.wg.Done()
	defer close(out)
	defer func() {
		s.mu.Lock()
		delete(s.subs[channel], sub)
		if len(s.subs[channel]) == 0 {
			delete(s.subs, channel)
		}
		s.mu.Unlock()
		sub.mu.Lock()
		dropped := sub.dropped
		sub.mu.Unlock()
		if dropped > 0 {
			s.log.Warn("subscriber too slow, messages dropped", "channel", channel, "dropped", dropped)
		}
	}()
	for {
		sub.mu.Lock()
		batch, dropped := sub.pending, sub.dropped
		sub.pending, sub.dropped = nil, 0
		sub.mu.Unlock()
		if dropped > 0 {
			s.log.Warn("subscriber too slow, messages dropped", "channel", channel, "dropped", dropped)
		}
		for _, m := range batch {
			select {
			case out <- m:
			case <-ctx.Done():
				return
			case <-s.done:
				return
			}
		}
		select {
		case <-sub.wake:
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
	}
}

// Ping reports whether the State is open.
func (s *State) Ping(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("ping: %w", state.ErrClosed)
	}
	return nil
}

// Close ends blocked calls and subscriptions, stops expiry timers and
// drops everything. Later calls return state.ErrClosed; Close itself may be
// called again.
func (s *State) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for _, lg := range s.logs {
		if lg.timer != nil {
			lg.timer.Stop()
		}
	}
	s.logs, s.waits = nil, nil
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

var _ state.State = (*State)(nil)
