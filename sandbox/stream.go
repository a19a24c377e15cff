package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// EventType names a Server-Sent Event of an execution's stream.
type EventType string

// Event types, in the order a stream delivers them: status changes and
// output as they happen, then one done event, which ends the stream.
const (
	EventStdout EventType = "stdout"
	EventStderr EventType = "stderr"
	EventStatus EventType = "status"
	EventDone   EventType = "done"
)

// Event is one event of an execution's stream.
type Event struct {
	// ID orders the events of one execution; resume after it with
	// StreamOptions.After.
	ID   uint64
	Type EventType
	// Text is the output of a stdout or stderr event.
	Text string
	// Status is the new status of a status event.
	Status Status
	// Result is the final record, on the done event.
	Result *Result
}

// StreamOptions tune Stream.
type StreamOptions struct {
	// After skips the events up to and including this id (a resume point
	// kept from an earlier stream).
	After uint64
	// IdleTimeout is how long a connection may stay silent before it is
	// considered broken and resumed; the server sends a keep-alive every
	// 15 s. Zero means 45 s.
	IdleTimeout time.Duration
}

// maxEventBytes caps one event; the server batches output in far smaller
// events.
const maxEventBytes = 16 << 20

// Stream follows an execution's events as they happen: its output, status
// changes and finally the done event with the record, after which the
// sequence ends. A broken connection is resumed from the last event
// received (Last-Event-ID), so no event is lost or repeated; reconnecting
// follows Config.MaxRetries (at least two attempts) and every resume that
// brings new events starts the count afresh. An error ends the sequence
// and is its last element. Stream is bounded by ctx, not Config.Timeout.
//
//	for ev, err := range client.Stream(ctx, id, sandbox.StreamOptions{}) {
//		if err != nil { ... }
//		switch ev.Type {
//		case sandbox.EventStdout:
//			os.Stdout.WriteString(ev.Text)
//		case sandbox.EventDone:
//			res = ev.Result
//		}
//	}
func (c *Client) Stream(ctx context.Context, id string, opts StreamOptions) iter.Seq2[Event, error] {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 45 * time.Second
	}
	return func(yield func(Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		last := opts.After
		failures := 0
		for {
			n, done, err := c.streamOnce(ctx, id, last, opts.IdleTimeout, func(ev Event) bool {
				last = ev.ID
				return yield(ev, nil)
			})
			if done || ctx.Err() != nil && err == nil {
				return
			}
			if err != nil {
				var ae *APIError
				if ctx.Err() != nil || errors.As(err, &ae) && !ae.temporary() {
					yield(Event{}, err)
					return
				}
			}
			// Broken or ended early: resume after the last event.
			if n > 0 {
				failures = 0
			}
			failures++
			if failures > max(c.maxRetries, 2) {
				if err == nil {
					err = &TransportError{Op: "GET /v1/executions/" + id + "/events", ExecutionID: id,
						Err: io.ErrUnexpectedEOF}
				}
				yield(Event{}, err)
				return
			}
			var ae *APIError
			wait := jitter(c.backoff<<min(failures-1, 10), 5*time.Second)
			if errors.As(err, &ae) && ae.RetryAfter > 0 {
				wait = ae.RetryAfter
			}
			if serr := sleep(ctx, wait); serr != nil {
				yield(Event{}, fmt.Errorf("corral: stream %s: %w", id, serr))
				return
			}
		}
	}
}

// streamOnce reads one connection's events after the given id. It returns
// how many events it delivered, whether the stream is over (done event or
// the consumer stopped), and why the connection ended otherwise.
func (c *Client) streamOnce(ctx context.Context, id string, after uint64, idle time.Duration,
	emit func(Event) bool) (int, bool, error) {
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	h := http.Header{"Accept": {"text/event-stream"}}
	if after > 0 {
		h.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	}
	r := request{method: http.MethodGet, path: "/v1/executions/" + url.PathEscape(id) + "/events", header: h, executionID: id}
	resp, err := c.send(connCtx, r)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, c.ctxError(r, ctx.Err())
		}
		return 0, false, &TransportError{Op: r.method + " " + r.path, ExecutionID: id, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return 0, false, readAPIError(resp)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return 0, false, &TransportError{Op: r.method + " " + r.path, ExecutionID: id,
			Err: fmt.Errorf("answer is %q, not an event stream", ct)}
	}
	// A connection that goes silent (a half-open TCP connection, a proxy
	// that holds it) is dropped and resumed.
	idleTimer := time.AfterFunc(idle, cancel)
	defer idleTimer.Stop()

	br := bufio.NewReaderSize(resp.Body, 64<<10)
	n := 0
	var cur struct {
		id    uint64
		event string
		data  strings.Builder
	}
	for {
		line, err := readLine(br)
		if err != nil {
			if ctx.Err() != nil {
				return n, false, c.ctxError(r, ctx.Err())
			}
			if errors.Is(err, io.EOF) {
				return n, false, nil
			}
			return n, false, &TransportError{Op: r.method + " " + r.path, ExecutionID: id, Err: err}
		}
		idleTimer.Reset(idle)
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "": // a comment: keep-alive
			case "id":
				cur.id, _ = strconv.ParseUint(value, 10, 64)
			case "event":
				cur.event = value
			case "data":
				if cur.data.Len() > 0 {
					cur.data.WriteByte('\n')
				}
				cur.data.WriteString(value)
			}
			continue
		}
		if cur.event == "" && cur.data.Len() == 0 {
			continue
		}
		ev, err := parseEvent(cur.id, cur.event, cur.data.String())
		cur.id, cur.event = 0, ""
		cur.data.Reset()
		if err != nil {
			return n, false, &TransportError{Op: r.method + " " + r.path, ExecutionID: id, Err: err}
		}
		if ev.ID != 0 && ev.ID <= after {
			continue // already delivered
		}
		n++
		if ev.ID != 0 {
			after = ev.ID
		}
		if !emit(ev) {
			return n, true, nil
		}
		if ev.Type == EventDone {
			return n, true, nil
		}
	}
}

// readLine reads one line without its line ending, refusing lines above
// maxEventBytes.
func readLine(br *bufio.Reader) (string, error) {
	var b []byte
	for {
		frag, err := br.ReadSlice('\n')
		b = append(b, frag...)
		if len(b) > maxEventBytes {
			return "", fmt.Errorf("event line longer than %d bytes", maxEventBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(b) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
}

func parseEvent(id uint64, typ, data string) (Event, error) {
	ev := Event{ID: id, Type: EventType(typ)}
	var err error
	switch ev.Type {
	case EventStdout, EventStderr:
		var d struct {
			Text string `json:"text"`
		}
		err = json.Unmarshal([]byte(data), &d)
		ev.Text = d.Text
	case EventStatus:
		var d struct {
			Status Status `json:"status"`
		}
		err = json.Unmarshal([]byte(data), &d)
		ev.Status = d.Status
	case EventDone:
		ev.Result = new(Result)
		err = json.Unmarshal([]byte(data), ev.Result)
	}
	if err != nil {
		return ev, fmt.Errorf("decode %s event %d: %w", typ, id, err)
	}
	return ev, nil
}
