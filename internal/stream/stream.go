// Package stream is how Corral streams events to a client, whatever the
// wire: one follower (Follow) reads a source of events from where the
// client resumes, waits for more, writes a keep-alive whenever the stream
// was silent for its interval, flushes after each batch, and ends with the
// source, the client's context or a failed write. Its sources are a log
// read from an offset (Log: a live process's output), events a producer
// pushes through a bounded queue (Queue, and Produce around it: a code
// context's run, a directory watch), or any other Source (an execution's
// event log). The one Server-Sent Events writer (SSE) is here too. A wire
// supplies only its encoder: /v1's SSE streams, envd's Connect server
// streams and the code interpreter's newline-delimited JSON all follow
// through here.
package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrWrite marks the error of a write to the client (it is gone, or
// cannot take more): the stream, not its source, failed.
var ErrWrite = errors.New("stream: write to the client")

// Source is a sequence of events a stream follows. A source is read by one
// follower at a time.
type Source[E any] interface {
	// Next returns the events that follow those it returned before,
	// waiting up to wait for at least one: none and a nil error when none
	// came in time. Once every event was returned it returns io.EOF
	// itself (not wrapped: as io.Reader does), or why the source failed;
	// when ctx ends first, ctx's error.
	Next(ctx context.Context, wait time.Duration) ([]E, error)
}

// Wire is a stream's format, apart from its events (each stream encodes
// those itself): what it sends to say it is still there, and how what was
// written goes out.
type Wire interface {
	// KeepAlive writes a keep-alive.
	KeepAlive() error
	// Flush sends what was written.
	Flush() error
}

// Follow writes src's events with send until src ends (nil), ctx ends
// (ctx's error), src fails (its error) or a write does (an error wrapping
// ErrWrite). A batch of events is flushed together; whenever nothing went
// out for every, a keep-alive does. Follow holds at most one batch of
// src's: a slow client holds up the reading, not memory.
func Follow[E any](ctx context.Context, src Source[E], w Wire, send func(E) error, every time.Duration) error {
	last := time.Now() // when something last went out
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		wait := every - time.Since(last)
		if wait <= 0 {
			if err := w.KeepAlive(); err != nil {
				return wrote(err)
			}
			if err := w.Flush(); err != nil {
				return wrote(err)
			}
			last = time.Now()
			continue
		}
		evs, err := src.Next(ctx, wait)
		for _, ev := range evs {
			if werr := send(ev); werr != nil {
				return wrote(werr)
			}
		}
		if len(evs) > 0 {
			if werr := w.Flush(); werr != nil {
				return wrote(werr)
			}
			last = time.Now()
		}
		if err == io.EOF { // itself, by Source's contract: a wrapped one is a failure
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func wrote(err error) error { return fmt.Errorf("%w: %w", ErrWrite, err) }
