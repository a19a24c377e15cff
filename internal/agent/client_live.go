package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// The host's side of what a live sandbox needs beyond one program: a
// process's terminal, stat, listings to a depth, mkdir, move, and watches.
// Paths are the sandbox's: /workspace, /tmp, or paths under them (the
// roots themselves only where a call says so). A symbolic link on the way
// to a path is refused (KindSymlink) wherever it points, and one at its end
// is described, moved or refused, never followed.

// Resize changes the size of the process's terminal (started with a PTY);
// the process gets SIGWINCH. A process without a terminal is KindInvalid,
// one that has ended ESRCH.
func (p *Process) Resize(ctx context.Context, cols, rows uint16) error {
	b, _ := json.Marshal(PTYSize{Cols: cols, Rows: rows})
	return p.c.procCall(ctx, msgResize, p.id, b)
}

// Stat describes path, which may be /workspace or /tmp itself.
func (c *Client) Stat(ctx context.Context, path string, opts ...FileOption) (Entry, error) {
	payload, err := c.pathCall(ctx, msgStat, path, nil, opts)
	if err != nil {
		return Entry{}, err
	}
	var e Entry
	if err := json.Unmarshal(payload, &e); err != nil {
		return Entry{}, fmt.Errorf("decode stat: %w: %w", ErrProtocol, err)
	}
	return e, nil
}

// ListDepth lists the directory path (which may be /workspace or /tmp
// itself) and, to depth levels (1..MaxListDepth), the directories under
// it: each directory's entries by name, a directory's contents right after
// its entry. Links are listed, not followed. At most MaxListEntries
// entries: a listing of exactly that many may be cut.
func (c *Client) ListDepth(ctx context.Context, path string, depth int, opts ...FileOption) ([]Entry, error) {
	var l entryLines
	if _, err := c.request(ctx, msgListDepth, listRequest{Path: path, Depth: depth, User: fileUser(opts)}, &l); err != nil {
		return nil, err
	}
	return l.result()
}

// Mkdir makes the directory path, and with parents the directories on the
// way to it; with parents a directory already there is no error, without
// it is EEXIST.
func (c *Client) Mkdir(ctx context.Context, path string, parents bool, opts ...FileOption) error {
	_, err := c.request(ctx, msgMkdir, mkdirRequest{Path: path, Parents: parents, User: fileUser(opts)}, nil)
	return err
}

// Move renames from to to; what is at to is replaced as rename(2) replaces
// it. /workspace and /tmp are separate mounts in a sandbox: a move between
// them is EXDEV.
func (c *Client) Move(ctx context.Context, from, to string, opts ...FileOption) error {
	_, err := c.request(ctx, msgMove, moveRequest{From: from, To: to, User: fileUser(opts)}, nil)
	return err
}

// entryLines decodes a listing's lines of JSON as msgFileData frames bring
// them, at most MaxListEntries.
type entryLines struct {
	partial []byte
	entries []Entry
}

func (l *entryLines) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(l.partial)+len(b) > MaxPayload {
				return 0, fmt.Errorf("listing line over %d bytes: %w", MaxPayload, ErrProtocol)
			}
			l.partial = append(l.partial, b...)
			break
		}
		line := b[:i]
		if len(l.partial) > 0 {
			line = append(l.partial, line...)
			l.partial = nil
		}
		b = b[i+1:]
		if len(l.entries) == MaxListEntries {
			return 0, fmt.Errorf("listing over %d entries: %w", MaxListEntries, ErrProtocol)
		}
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return 0, fmt.Errorf("decode listing: %w: %w", ErrProtocol, err)
		}
		l.entries = append(l.entries, e)
	}
	return n, nil
}

func (l *entryLines) result() ([]Entry, error) {
	if len(l.partial) > 0 {
		return nil, fmt.Errorf("listing ends within a line: %w", ErrProtocol)
	}
	if l.entries == nil {
		return []Entry{}, nil
	}
	return l.entries, nil
}

// maxWatchBacklog caps the events a watch holds on the host for fn.
const maxWatchBacklog = 4096

// Watch reports changes in the directory path (which may be /workspace or
// /tmp itself), and with recursive in the directories under it, those made
// later included, to fn. It returns once the directory is watched. The
// watch lasts until stop is called or ctx is done; once stop returns fn is
// not called again, but for a call in progress. A watch that ends by itself
// (its directory removed or moved, the sandbox gone) makes a last call with
// OpEnd, and stop then says why. fn is called from a goroutine of the
// watch's own, in order; it may call stop. Events fn is too slow for are
// dropped past a bound and reported as OpOverflow, as are the agent's own
// overflows.
func (c *Client) Watch(ctx context.Context, path string, recursive bool, fn func(WatchEvent), opts ...FileOption) (stop func() error, err error) {
	b, _ := json.Marshal(watchRequest{Path: path, Recursive: recursive, User: fileUser(opts)})
	id, k := c.newCall()
	w := &clientWatch{c: c, id: id, root: path, fn: fn, wake: make(chan struct{}, 1), ended: make(chan struct{})}
	// Registered before sending: events follow the answer closely.
	c.mu.Lock()
	c.watches[id] = w
	c.mu.Unlock()
	if err := c.send(msgWatch, id, b); err != nil {
		c.forgetCall(id)
		c.forgetWatch(id)
		return nil, err
	}
	if _, err := c.wait(ctx, id, k); err != nil {
		c.forgetWatch(id)
		if ctx.Err() != nil {
			// The agent may be watching already; frames are handled in
			// order, so this ends it.
			_ = c.send(msgUnwatch, id, nil)
		}
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	go w.deliver()
	unregister := context.AfterFunc(ctx, func() { _ = w.stop() })
	return func() error {
		unregister()
		return w.stop()
	}, nil
}

func (c *Client) forgetWatch(id uint32) {
	c.mu.Lock()
	delete(c.watches, id)
	c.mu.Unlock()
}

// watchFrame takes a watch's frame from the read loop.
func (c *Client) watchFrame(f frame) error {
	c.mu.Lock()
	w := c.watches[f.id]
	if f.typ == msgWatchEnd {
		delete(c.watches, f.id)
	}
	c.mu.Unlock()
	if f.typ == msgWatchEnd {
		var e errorReply
		if err := json.Unmarshal(f.payload, &e); err != nil {
			return fmt.Errorf("decode watch end: %w", err)
		}
		if w != nil {
			var err error
			if e.Kind != "" {
				err = &RemoteError{Kind: e.Kind, Message: e.Message}
			}
			w.finish(err)
		}
		return nil
	}
	var evs []WatchEvent
	if err := json.Unmarshal(f.payload, &evs); err != nil {
		return fmt.Errorf("decode watch events: %w", err)
	}
	if w != nil {
		w.push(evs)
	}
	return nil
}

// clientWatch is a watch on the host: the read loop queues its events, a
// goroutine of its own hands them to fn.
type clientWatch struct {
	c    *Client
	id   uint32
	root string
	fn   func(WatchEvent)
	wake chan struct{}
	// ended is closed when the agent has ended the watch (at the host's
	// request or not), or the control stream is lost.
	ended chan struct{}

	mu       sync.Mutex
	queue    []WatchEvent
	overflow bool
	stopped  bool
	isEnded  bool
	err      error // why it ended: nil when the host stopped it

	once    sync.Once
	stopErr error
}

func (w *clientWatch) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *clientWatch) push(evs []WatchEvent) {
	w.mu.Lock()
	if !w.stopped {
		if room := maxWatchBacklog - len(w.queue); len(evs) > room {
			evs, w.overflow = evs[:room], true
		}
		w.queue = append(w.queue, evs...)
	}
	w.mu.Unlock()
	w.poke()
}

func (w *clientWatch) finish(err error) {
	w.mu.Lock()
	if !w.isEnded {
		w.isEnded, w.err = true, err
		close(w.ended)
	}
	w.mu.Unlock()
	w.poke()
}

// deliver hands the events to fn until the watch ends. Nothing is queued
// after the end (the agent's last frame), so what it finds then is all.
func (w *clientWatch) deliver() {
	for range w.wake {
		w.mu.Lock()
		evs, over, ended := w.queue, w.overflow, w.isEnded
		w.queue, w.overflow = nil, false
		w.mu.Unlock()
		if over {
			evs = append(evs, WatchEvent{Path: w.root, Op: OpOverflow})
		}
		if ended {
			evs = append(evs, WatchEvent{Path: w.root, Op: OpEnd})
		}
		for _, e := range evs {
			if w.isStopped() {
				break
			}
			w.fn(e)
		}
		if ended {
			return
		}
	}
}

func (w *clientWatch) isStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// stop ends the watch, unless it has ended, and says why it ended: nil when
// the host stopped it.
func (w *clientWatch) stop() error {
	w.once.Do(func() {
		w.mu.Lock()
		w.stopped, w.queue = true, nil
		w.mu.Unlock()
		select {
		case <-w.ended:
		default:
			if err := w.c.send(msgUnwatch, w.id, nil); err == nil {
				select {
				case <-w.ended:
				case <-w.c.done:
				}
			}
		}
		w.mu.Lock()
		w.stopErr = w.err
		if !w.isEnded {
			w.stopErr = w.c.lostErr()
		}
		w.mu.Unlock()
		w.c.forgetWatch(w.id)
	})
	return w.stopErr
}
