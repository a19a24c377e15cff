// Package statetest is the conformance suite of state.State: every
// implementation's tests run it, so they all keep the same promises.
package statetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/corralhq/corral/internal/state"
)

// Opener returns a State for t, closed when t ends. Called again with the
// same t it returns another node on the same backend (for memory the same
// instance, for redis a second client on the same prefix); States of
// different tests share nothing.
type Opener func(t *testing.T) state.State

// patience bounds every wait for something that must happen; it is never
// slept, only waited up to.
const patience = 10 * time.Second

// Run checks that the States open returns keep every promise of
// state.State. The checks run in parallel.
func Run(t *testing.T, open func(t *testing.T) state.State) {
	tests := []struct {
		name string
		run  func(*testing.T, Opener)
	}{
		{"Events", testEvents},
		{"EventsWait", testEventsWait},
		{"EventsCap", testEventsCap},
		{"ExpireEvents", testExpireEvents},
		{"BinarySafe", testBinarySafe},
		{"NotifySubscribe", testNotifySubscribe},
		{"SubscribeEnds", testSubscribeEnds},
		{"Isolation", testIsolation},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, open)
		})
	}
}

// Main runs an implementation's tests, then cleanup, and fails the test
// binary if goroutines outlive the tests: every goroutine a State starts
// must end with its ctx or with Close.
func Main(m *testing.M, cleanup ...func()) {
	before := runtime.NumGoroutine()
	code := m.Run()
	for _, f := range cleanup {
		f()
	}
	if code == 0 {
		if err := noLeaks(before); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// noLeaks waits until no more goroutines run than before did.
func noLeaks(before int) error {
	deadline := time.Now().Add(patience)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			return fmt.Errorf("goroutines leaked: %d running after the tests, %d before:\n%s",
				runtime.NumGoroutine(), before, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// recv waits for a value from ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("%s: channel closed", what)
		}
		return v
	case <-time.After(patience):
		t.Fatalf("%s: nothing after %v", what, patience)
	}
	panic("unreachable")
}

// closed waits for ch to be closed, discarding what it still delivers.
func closed[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatalf("%s: not closed after %v", what, patience)
		}
	}
}

// pending fails t if ch already has a value: the call behind it should be
// blocked.
func pending[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s returned early: %v", what, v)
	default:
	}
}

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type result[T any] struct {
	v   T
	err error
}

// async runs f in a goroutine that ends before t does.
func async[T any](t *testing.T, f func() (T, error)) <-chan result[T] {
	ch := make(chan result[T], 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		v, err := f()
		ch <- result[T]{v, err}
	})
	t.Cleanup(wg.Wait)
	return ch
}

// must turns a call's value and error into the value, failing t on an
// error: must(s.QueueLen(ctx))(t).
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// appendAll appends evs to id's log, setting their ids, which must
// increase.
func appendAll(t *testing.T, s state.State, id string, evs []state.Event) {
	t.Helper()
	var last uint64
	for i := range evs {
		n := must(s.Append(t.Context(), id, evs[i].Type, evs[i].Data))(t)
		if n <= last {
			t.Fatalf("Append #%d returned id %d after %d", i, n, last)
		}
		evs[i].ID, last = n, n
	}
}

func diffEvents(want, got []state.Event) string {
	return cmp.Diff(want, got, cmpopts.EquateEmpty())
}

func testEvents(t *testing.T, open Opener) {
	ctx := t.Context()
	s := open(t)
	evs := []state.Event{
		{Type: state.EventStatus, Data: []byte("running")},
		{Type: state.EventStdout, Data: []byte("hello\n")},
		{Type: state.EventStderr, Data: []byte("oops\n")},
		{Type: state.EventStdout, Data: nil},
		{Type: state.EventDone, Data: []byte(`{"status":"success"}`)},
	}
	appendAll(t, s, "e1", evs)
	other := []state.Event{{Type: state.EventStdout, Data: []byte("other")}}
	appendAll(t, s, "e2", other)

	for i := -1; i < len(evs); i++ {
		var after uint64
		if i >= 0 {
			after = evs[i].ID
		}
		for _, wait := range []bool{false, true} {
			if wait && i == len(evs)-1 {
				continue
			}
			got := must(s.Events(ctx, "e1", after, wait))(t)
			if diff := diffEvents(evs[i+1:], got); diff != "" {
				t.Errorf("Events(after %d, wait %v) (-want +got):\n%s", after, wait, diff)
			}
		}
	}
	if diff := diffEvents(other, must(s.Events(ctx, "e2", 0, false))(t)); diff != "" {
		t.Errorf("other log (-want +got):\n%s", diff)
	}
	for _, after := range []uint64{evs[len(evs)-1].ID, evs[len(evs)-1].ID + 100, ^uint64(0)} {
		if got := must(s.Events(ctx, "e1", after, false))(t); len(got) != 0 {
			t.Errorf("Events(after %d) = %v, want none", after, got)
		}
	}
	if got := must(s.Events(ctx, "never", 0, false))(t); len(got) != 0 {
		t.Errorf("Events of a log never written = %v", got)
	}
}

func testEventsWait(t *testing.T, open Opener) {
	ctx := t.Context()
	s, peer := open(t), open(t)
	first := []state.Event{{Type: state.EventStatus, Data: []byte("running")}}
	appendAll(t, s, "w", first)

	// Several waiters, one on a log that does not exist yet, are all woken
	// by the Append they wait for.
	type wait struct {
		id    string
		after uint64
		ch    <-chan result[[]state.Event]
	}
	var waits []wait
	for _, w := range []wait{{id: "w", after: first[0].ID}, {id: "w", after: first[0].ID}, {id: "fresh"}} {
		w.ch = async(t, func() ([]state.Event, error) { return s.Events(ctx, w.id, w.after, true) })
		waits = append(waits, w)
	}
	for _, w := range waits {
		pending(t, w.ch, "Events(wait) of "+w.id)
	}
	next := []state.Event{{Type: state.EventStdout, Data: []byte("out")}}
	appendAll(t, peer, "w", next)
	fresh := []state.Event{{Type: state.EventStdout, Data: []byte("new")}}
	appendAll(t, peer, "fresh", fresh)
	for _, w := range waits {
		r := recv(t, w.ch, "Events(wait) of "+w.id)
		check(t, r.err)
		want := next
		if w.id == "fresh" {
			want = fresh
		}
		if diff := diffEvents(want, r.v); diff != "" {
			t.Errorf("woken Events(wait) of %s (-want +got):\n%s", w.id, diff)
		}
	}

	tests := []struct {
		name    string
		ctx     func(context.Context) (context.Context, context.CancelFunc)
		wantErr error
	}{
		{"deadline", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, 100*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", context.WithCancel, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx(t.Context())
			defer cancel()
			ch := async(t, func() ([]state.Event, error) { return s.Events(ctx, "w", next[0].ID, true) })
			if tc.wantErr == context.Canceled {
				cancel()
			}
			r := recv(t, ch, "Events(wait)")
			if !errors.Is(r.err, tc.wantErr) {
				t.Fatalf("Events(wait) = %v, %v; want %v", r.v, r.err, tc.wantErr)
			}
		})
	}
}

func testEventsCap(t *testing.T, open Opener) {
	ctx := t.Context()
	s := open(t)
	const extra = 10
	evs := make([]state.Event, state.MaxEvents+extra)
	for i := range evs {
		evs[i] = state.Event{Type: state.EventStdout, Data: []byte(strconv.Itoa(i))}
	}
	appendAll(t, s, "cap", evs)
	kept := evs[extra:]
	if diff := diffEvents(kept, must(s.Events(ctx, "cap", 0, false))(t)); diff != "" {
		t.Errorf("log past MaxEvents (-want +got):\n%s", diff)
	}
	// Resuming from a dropped id returns what is kept; from a kept one,
	// exactly what follows it.
	if diff := diffEvents(kept, must(s.Events(ctx, "cap", evs[3].ID, false))(t)); diff != "" {
		t.Errorf("Events after a dropped id (-want +got):\n%s", diff)
	}
	last := evs[len(evs)-5:]
	if diff := diffEvents(last[1:], must(s.Events(ctx, "cap", last[0].ID, false))(t)); diff != "" {
		t.Errorf("Events after a kept id (-want +got):\n%s", diff)
	}
}

func testExpireEvents(t *testing.T, open Opener) {
	ctx := t.Context()
	s := open(t)
	ev := func() []state.Event { return []state.Event{{Type: state.EventStdout, Data: []byte("x")}} }
	long, renewed, short := ev(), ev(), ev()
	appendAll(t, s, "long", long)
	appendAll(t, s, "renewed", renewed)
	appendAll(t, s, "short", short)
	check(t, s.ExpireEvents(ctx, "long", time.Hour))
	// A later ExpireEvents replaces an earlier one, which would have fired
	// before short's.
	check(t, s.ExpireEvents(ctx, "renewed", 50*time.Millisecond))
	check(t, s.ExpireEvents(ctx, "renewed", time.Hour))
	check(t, s.ExpireEvents(ctx, "short", 50*time.Millisecond))
	check(t, s.ExpireEvents(ctx, "never", time.Millisecond))

	eventually(t, "short log expired", func() bool {
		return len(must(s.Events(ctx, "short", 0, false))(t)) == 0
	})
	for _, c := range []struct {
		id   string
		want []state.Event
	}{{"long", long}, {"renewed", renewed}} {
		if diff := diffEvents(c.want, must(s.Events(ctx, c.id, 0, false))(t)); diff != "" {
			t.Errorf("%s log (-want +got):\n%s", c.id, diff)
		}
	}

	check(t, s.ExpireEvents(ctx, "long", 0))
	if got := must(s.Events(ctx, "long", 0, false))(t); len(got) != 0 {
		t.Errorf("log after ExpireEvents(0) = %v", got)
	}
	// An expired log can be written again.
	again := ev()
	appendAll(t, s, "short", again)
	if diff := diffEvents(again, must(s.Events(ctx, "short", 0, false))(t)); diff != "" {
		t.Errorf("log written after expiry (-want +got):\n%s", diff)
	}
}

func testBinarySafe(t *testing.T, open Opener) {
	big := make([]byte, 1<<20)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(big)
	tests := []struct {
		name string
		data []byte
	}{
		{"nul bytes", []byte("a\x00b\x00\x00c")},
		{"invalid utf-8", []byte("\xff\xfe\xc3\x28\xa0\xa1")},
		{"line endings", []byte("\r\n\n\r")},
		{"empty", []byte{}},
		{"1 MiB random", big},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			id := "bin:\x00\xff" + tc.name
			evs := []state.Event{{Type: state.EventStdout, Data: tc.data}, {Type: state.EventStderr, Data: tc.data}}
			appendAll(t, s, id, evs)
			got := must(s.Events(ctx, id, 0, false))(t)
			if len(got) != len(evs) {
				t.Fatalf("got %d events, want %d", len(got), len(evs))
			}
			for i := range got {
				if got[i].ID != evs[i].ID || got[i].Type != evs[i].Type || !bytes.Equal(got[i].Data, tc.data) {
					t.Errorf("event %d: id %d type %q, %d bytes; want id %d type %q, %d bytes (equal: %v)",
						i, got[i].ID, got[i].Type, len(got[i].Data), evs[i].ID, evs[i].Type, len(tc.data),
						bytes.Equal(got[i].Data, tc.data))
				}
			}

			// Messages are as binary-safe as event data.
			msg := string(tc.data)
			sub := must(s.Subscribe(ctx, state.ChannelDone))(t)
			check(t, s.Notify(ctx, state.ChannelDone, msg))
			if got := recv(t, sub, "message"); got != msg {
				t.Errorf("Notify mangled a %d-byte message into %d bytes", len(msg), len(got))
			}
		})
	}
}

func testNotifySubscribe(t *testing.T, open Opener) {
	ctx := t.Context()
	a, b := open(t), open(t)
	cancelB := must(b.Subscribe(ctx, state.ChannelCancel))(t)
	doneB := must(b.Subscribe(ctx, state.ChannelDone))(t)
	cancelA := must(a.Subscribe(ctx, state.ChannelCancel))(t)

	check(t, a.Notify(ctx, state.ChannelCancel, "c1"))
	check(t, a.Notify(ctx, state.ChannelDone, "d1"))
	for _, c := range []struct {
		name string
		ch   <-chan string
		want string
	}{
		{"cancel on the other node", cancelB, "c1"},
		{"cancel on the same node", cancelA, "c1"},
		{"done, which must not see cancel's message", doneB, "d1"},
	} {
		if got := recv(t, c.ch, c.name); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}

	// Messages of one publisher arrive in order, none lost.
	var want []string
	for i := range 200 {
		want = append(want, "m"+strconv.Itoa(i))
		check(t, b.Notify(ctx, state.ChannelCancel, want[i]))
	}
	for _, ch := range []<-chan string{cancelA, cancelB} {
		var got []string
		for range want {
			got = append(got, recv(t, ch, "ordered message"))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("messages (-want +got):\n%s", diff)
		}
	}
}

func testSubscribeEnds(t *testing.T, open Opener) {
	s := open(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch := must(s.Subscribe(ctx, state.ChannelCancel))(t)
	check(t, s.Notify(t.Context(), state.ChannelCancel, "before"))
	if got := recv(t, ch, "message"); got != "before" {
		t.Errorf("got %q", got)
	}
	// Unread messages do not keep the subscription alive.
	check(t, s.Notify(t.Context(), state.ChannelCancel, "unread"))
	cancel()
	closed(t, ch, "subscription after its ctx ended")
	check(t, s.Notify(t.Context(), state.ChannelCancel, "after"))
}

func testIsolation(t *testing.T, open Opener) {
	ctx := t.Context()
	a := open(t)
	appendAll(t, a, "ea", []state.Event{{Type: state.EventStdout, Data: []byte("a")}})
	sub := must(a.Subscribe(ctx, state.ChannelCancel))(t)

	t.Run("other", func(t *testing.T) {
		ctx := t.Context()
		b := open(t)
		if got := must(b.Events(ctx, "ea", 0, false))(t); len(got) != 0 {
			t.Errorf("Events = %v", got)
		}
		check(t, b.Notify(ctx, state.ChannelCancel, "from b"))
	})

	// Had "from b" reached this subscriber, it would come first.
	check(t, a.Notify(ctx, state.ChannelCancel, "from a"))
	if got := recv(t, sub, "message"); got != "from a" {
		t.Errorf("subscriber got %q from another backend", got)
	}
}

func testClose(t *testing.T, open Opener) {
	ctx := t.Context()
	s := open(t)
	appendAll(t, s, "e", []state.Event{{Type: state.EventStdout, Data: []byte("x")}})
	events := async(t, func() ([]state.Event, error) { return s.Events(ctx, "e", ^uint64(0)>>1, true) })
	sub := must(s.Subscribe(ctx, state.ChannelCancel))(t)

	check(t, s.Close())
	if r := recv(t, events, "Events(wait)"); !errors.Is(r.err, state.ErrClosed) {
		t.Errorf("blocked Events after Close = %v, %v; want ErrClosed", r.v, r.err)
	}
	closed(t, sub, "subscription after Close")

	calls := []struct {
		name string
		call func() error
	}{
		{"Append", func() error { _, err := s.Append(ctx, "e", state.EventStdout, nil); return err }},
		{"Events", func() error { _, err := s.Events(ctx, "e", 0, false); return err }},
		{"ExpireEvents", func() error { return s.ExpireEvents(ctx, "e", time.Second) }},
		{"Notify", func() error { return s.Notify(ctx, state.ChannelDone, "x") }},
		{"Subscribe", func() error { _, err := s.Subscribe(ctx, state.ChannelDone); return err }},
		{"Ping", func() error { return s.Ping(ctx) }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, state.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", c.name, err)
		}
	}
	check(t, s.Close())
}
