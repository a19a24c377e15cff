// Package redis keeps in-flight state in Redis (7.0 or later), shared by
// every node of a deployment: the state.State for scale-out.
//
// Every key and channel starts with the URL's prefix P (default "corral:"),
// so deployments and tests can share a server:
//
//	{P}events:{id}     stream; entry "0-<n>" is event n, fields t (type), d (data)
//	{P}signal:{name}   pub/sub channel of Notify/Subscribe
//
// Event ids are the sequence part of stream ids: every XADD asks for "0-*",
// so Redis numbers one execution's events 1, 2, 3, ... in the same atomic
// step that appends them (trimming never reuses a number), and XREAD from
// "0-<after>" resumes exactly after a given id.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/corralhq/corral/internal/state"
)

// DefaultPrefix is the key prefix when the URL names none.
const DefaultPrefix = "corral:"

// block bounds one server-side wait of Events: go-redis cannot
// abandon a command in flight, so waits are cut into pieces between which
// ctx and Close are checked.
const block = time.Second

// maxPending bounds the messages a subscriber may fall behind by; past it
// new messages are dropped (and logged).
const maxPending = 1 << 16

// State is a state.State in Redis. It is safe for concurrent use.
type State struct {
	rdb    *goredis.Client
	prefix string
	log    *slog.Logger
	// done is closed by Close; waits and subscriptions watch it.
	done chan struct{}
	// calls counts calls and subscriptions in progress; Close waits for
	// them before it closes the client, so none is cut off mid-command
	// (an XREAD cut off mid-reply would be misread).
	calls sync.WaitGroup

	// mu is held for reading to register a call, for writing to close.
	mu     sync.RWMutex
	closed bool
}

// Open connects to the Redis server at rawURL, a go-redis URL
// ("redis://[user:password@]host:port/db", "rediss://...", "unix://...")
// that may carry prefix=P among its query options. log receives warnings
// (a subscriber too slow to keep up); nil discards them.
func Open(ctx context.Context, rawURL string, log *slog.Logger) (*State, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the URL, password included.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	q := u.Query()
	prefix := DefaultPrefix
	if q.Has("prefix") {
		prefix = q.Get("prefix")
		q.Del("prefix")
		u.RawQuery = q.Encode()
	}
	opt, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("parse redis url: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &State{rdb: goredis.NewClient(opt), prefix: prefix, log: log, done: make(chan struct{})}
	if err := s.checkServer(ctx); err != nil {
		return nil, errors.Join(err, s.rdb.Close())
	}
	return s, nil
}

// checkServer pings the server and refuses one older than 7.0, which
// cannot number stream entries as "0-*".
func (s *State) checkServer(ctx context.Context) error {
	info, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		return fmt.Errorf("connect to redis at %s: %w", s.rdb.Options().Addr, err)
	}
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err == nil && n < 7 {
			return fmt.Errorf("redis %s is too old: corral needs 7.0 or later", v)
		}
	}
	return nil
}

func (s *State) key(parts ...string) string { return s.prefix + strings.Join(parts, ":") }

// enter registers a call, or reports that the State is closed.
func (s *State) enter(op string) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return fmt.Errorf("%s: %w", op, state.ErrClosed)
	}
	s.calls.Add(1)
	return nil
}

// blockFor is how long one server-side wait may last: block, or what is
// left of ctx's deadline, but at least a millisecond (0 would be forever).
func (s *State) blockFor(ctx context.Context) time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return block
	}
	return max(min(block, time.Until(d)), time.Millisecond)
}

// waitOver reports why a blocking call must stop waiting, if it must.
func (s *State) waitOver(ctx context.Context) error {
	select {
	case <-s.done:
		return state.ErrClosed
	default:
		return ctx.Err()
	}
}

// Append adds an event to id's stream, trimmed to exactly state.MaxEvents.
func (s *State) Append(ctx context.Context, id string, typ string, data []byte) (uint64, error) {
	op := "append event to " + id
	if err := s.enter(op); err != nil {
		return 0, err
	}
	defer s.calls.Done()
	sid, err := s.rdb.XAdd(ctx, &goredis.XAddArgs{
		Stream: s.key("events", id),
		MaxLen: state.MaxEvents,
		ID:     "0-*",
		Values: []any{"t", typ, "d", data},
	}).Result()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	n, err := eventID(sid)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	return n, nil
}

// eventID is the event id of stream id "0-<n>".
func eventID(sid string) (uint64, error) {
	seq, ok := strings.CutPrefix(sid, "0-")
	if !ok {
		return 0, fmt.Errorf("stream id %q: not 0-<n>", sid)
	}
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stream id %q: %w", sid, err)
	}
	return n, nil
}

// Events returns id's events after the given id. With wait, it waits with
// XREAD BLOCK, in pieces of at most a second (or what is left of ctx's
// deadline), so that ctx and Close are noticed.
func (s *State) Events(ctx context.Context, id string, after uint64, wait bool) ([]state.Event, error) {
	op := "events of " + id
	if err := s.enter(op); err != nil {
		return nil, err
	}
	defer s.calls.Done()
	args := &goredis.XReadArgs{
		Streams: []string{s.key("events", id), "0-" + strconv.FormatUint(after, 10)},
		Block:   -1,
	}
	for {
		if wait {
			if err := s.waitOver(ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			args.Block = s.blockFor(ctx)
		}
		streams, err := s.rdb.XRead(ctx, args).Result()
		switch {
		case errors.Is(err, goredis.Nil):
			if !wait {
				return nil, nil
			}
			continue
		case err != nil:
			if cerr := ctx.Err(); cerr != nil {
				err = cerr
			}
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		var out []state.Event
		for _, st := range streams {
			for _, m := range st.Messages {
				n, err := eventID(m.ID)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", op, err)
				}
				typ, _ := m.Values["t"].(string)
				data, _ := m.Values["d"].(string)
				out = append(out, state.Event{ID: n, Type: typ, Data: []byte(data)})
			}
		}
		if len(out) > 0 || !wait {
			return out, nil
		}
	}
}

// ExpireEvents drops id's stream after ttl (PEXPIRE), replacing any earlier
// expiry. A stream that does not exist is left alone; ttl below a
// millisecond drops it now.
func (s *State) ExpireEvents(ctx context.Context, id string, ttl time.Duration) error {
	op := "expire events of " + id
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.calls.Done()
	k := s.key("events", id)
	var err error
	if ttl < time.Millisecond {
		err = s.rdb.Del(ctx, k).Err()
	} else {
		err = s.rdb.PExpire(ctx, k, ttl).Err()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// Notify publishes msg on channel to every node's subscribers.
func (s *State) Notify(ctx context.Context, channel, msg string) error {
	op := "notify " + channel
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.calls.Done()
	if err := s.rdb.Publish(ctx, s.key("signal", channel), msg).Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// Subscribe delivers channel's messages until ctx ends or the State is
// closed, then closes the returned channel. It returns once Redis has
// confirmed the subscription. Pub/sub is at most once: messages published
// while the connection is being re-established are lost, and a subscriber
// that falls more than 65536 messages behind loses the newest ones
// (logged).
func (s *State) Subscribe(ctx context.Context, channel string) (<-chan string, error) {
	op := "subscribe " + channel
	if err := s.enter(op); err != nil {
		return nil, err
	}
	ps := s.rdb.Subscribe(ctx, s.key("signal", channel))
	// The first reply is the confirmation; after it, every PUBLISH reaches
	// this connection.
	if _, err := ps.Receive(ctx); err != nil {
		s.calls.Done()
		return nil, fmt.Errorf("%s: %w", op, errors.Join(err, ps.Close()))
	}
	out := make(chan string)
	go s.deliver(ctx, channel, ps, out)
	return out, nil
}

// deliver relays ps's messages to out, queueing them so that go-redis never
// waits on a slow reader; it owns ps and out and closes both.
func (s *State) deliver(ctx context.Context, channel string, ps *goredis.PubSub, out chan<- string) {
	defer s.calls.Done()
	defer close(out)
	defer ps.Close()
	in := ps.Channel()
	var pending []string
	dropped := 0
	defer func() {
		if dropped > 0 {
			s.log.Warn("subscriber too slow, messages dropped", "channel", channel, "dropped", dropped)
		}
	}()
	for {
		var send chan<- string
		var next string
		if len(pending) > 0 {
			send, next = out, pending[0]
		}
		select {
		case m, ok := <-in:
			if !ok {
				return
			}
			if len(pending) >= maxPending {
				dropped++
				continue
			}
			if dropped > 0 {
				s.log.Warn("subscriber too slow, messages dropped", "channel", channel, "dropped", dropped)
				dropped = 0
			}
			pending = append(pending, m.Payload)
		case send <- next:
			pending[0] = ""
			pending = pending[1:]
		case <-ctx.Done():
			return
		case <-s.done:
			return
		}
	}
}

// Ping checks the connection.
func (s *State) Ping(ctx context.Context) error {
	const op = "ping redis"
	if err := s.enter(op); err != nil {
		return err
	}
	defer s.calls.Done()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// Close ends subscriptions, lets blocked calls return state.ErrClosed
// (within a second) and closes the connections. Later calls return
// state.ErrClosed; Close itself may be called again.
func (s *State) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.mu.Unlock()
	s.calls.Wait()
	if err := s.rdb.Close(); err != nil {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}

var _ state.State = (*State)(nil)
