package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/stream"
	"github.com/corralhq/corral/sandbox"
)

// filesystem.Filesystem: the file calls of the live sandbox
// (live.Sandbox), with its paths: absolute, or relative to /home/user (the
// sandbox user's home: E2B's convention; see home).

func (s *service) filesystemHandlers(opts []connect.HandlerOption) map[string]http.Handler {
	const p = "/filesystem.Filesystem/"
	return map[string]http.Handler{
		p + "Stat":             unary(connect.NewUnaryHandler(p+"Stat", s.stat, opts...)),
		p + "MakeDir":          unary(connect.NewUnaryHandler(p+"MakeDir", s.makeDir, opts...)),
		p + "Move":             unary(connect.NewUnaryHandler(p+"Move", s.move, opts...)),
		p + "ListDir":          unary(connect.NewUnaryHandler(p+"ListDir", s.listDir, opts...)),
		p + "Remove":           unary(connect.NewUnaryHandler(p+"Remove", s.remove, opts...)),
		p + "WatchDir":         streamed(connect.NewServerStreamHandler(p+"WatchDir", s.watchDir, opts...)),
		p + "CreateWatcher":    unary(connect.NewUnaryHandler(p+"CreateWatcher", s.createWatcher, opts...)),
		p + "GetWatcherEvents": unary(connect.NewUnaryHandler(p+"GetWatcherEvents", s.getWatcherEvents, opts...)),
		p + "RemoveWatcher":    unary(connect.NewUnaryHandler(p+"RemoveWatcher", s.removeWatcher, opts...)),
	}
}

// entryInfo describes a file of the sandbox as envd does. Owner, group
// and metadata are not known here and stay empty.
func entryInfo(f sandbox.SandboxFile) *EntryInfo {
	e := &EntryInfo{Name: f.Name, Path: f.Path, Size: Int64(f.Size), Mode: Uint32(f.Mode)}
	mode := os.FileMode(f.Mode & 0o7777)
	switch f.Type {
	case "file":
		e.Type = FileFile
	case "dir":
		e.Type, mode = FileDirectory, mode|os.ModeDir
	case "symlink":
		e.Type, mode = FileSymlink, mode|os.ModeSymlink
	default:
		mode |= os.ModeIrregular
	}
	e.Permissions = mode.String()
	if !f.ModTime.IsZero() {
		e.ModifiedTime = &Timestamp{f.ModTime}
	}
	if f.SymlinkTarget != "" {
		st := f.SymlinkTarget
		e.SymlinkTarget = &st
	}
	return e
}

func (s *service) stat(ctx context.Context, req *connect.Request[StatRequest]) (*connect.Response[StatResponse], error) {
	t := tgt(ctx)
	f, err := on(s, t, func(sb *live.Sandbox) (sandbox.SandboxFile, error) { return sb.StatFile(ctx, home(req.Msg.Path)) })
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	return connect.NewResponse(&StatResponse{Entry: entryInfo(f)}), nil
}

// makeDir makes a directory and those on the way to it; one already there
// is already_exists (E2B's SDKs answer false for it).
func (s *service) makeDir(ctx context.Context, req *connect.Request[MakeDirRequest]) (*connect.Response[MakeDirResponse], error) {
	t := tgt(ctx)
	mkdir := func(parents bool) (sandbox.SandboxFile, error) {
		return on(s, t, func(sb *live.Sandbox) (sandbox.SandboxFile, error) {
			return sb.MakeDir(ctx, home(req.Msg.Path), parents)
		})
	}
	f, err := mkdir(false)
	if _, refused := live.Refusal(err); refused && errors.Is(err, syscall.ENOENT) {
		// A directory on the way is missing: make them all. One made
		// meanwhile by another call is no error then.
		f, err = mkdir(true)
	}
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	return connect.NewResponse(&MakeDirResponse{Entry: entryInfo(f)}), nil
}

func (s *service) move(ctx context.Context, req *connect.Request[MoveRequest]) (*connect.Response[MoveResponse], error) {
	t := tgt(ctx)
	f, err := on(s, t, func(sb *live.Sandbox) (sandbox.SandboxFile, error) {
		return sb.Move(ctx, home(req.Msg.Source), home(req.Msg.Destination))
	})
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	return connect.NewResponse(&MoveResponse{Entry: entryInfo(f)}), nil
}

func (s *service) listDir(ctx context.Context, req *connect.Request[ListDirRequest]) (*connect.Response[ListDirResponse], error) {
	t := tgt(ctx)
	depth := int(req.Msg.Depth)
	if depth == 0 {
		depth = 1
	}
	files, err := on(s, t, func(sb *live.Sandbox) ([]sandbox.SandboxFile, error) {
		return sb.ListFiles(ctx, home(req.Msg.Path), depth)
	})
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	out := &ListDirResponse{Entries: make([]EntryInfo, 0, len(files))}
	for _, f := range files {
		out.Entries = append(out.Entries, *entryInfo(f))
	}
	return connect.NewResponse(out), nil
}

func (s *service) remove(ctx context.Context, req *connect.Request[RemoveRequest]) (*connect.Response[RemoveResponse], error) {
	t := tgt(ctx)
	if _, err := on(s, t, func(sb *live.Sandbox) (struct{}, error) { return struct{}{}, sb.RemoveFile(ctx, home(req.Msg.Path)) }); err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	return connect.NewResponse(&RemoveResponse{}), nil
}

// eventTypes maps the live sandbox's watch ops to envd's event types.
var eventTypes = map[string]EventType{
	live.OpCreate: EventCreate, live.OpWrite: EventWrite, live.OpRemove: EventRemove,
	live.OpRename: EventRename, live.OpChmod: EventChmod,
}

// fsEvent maps a change the live sandbox reports under root to envd's event
// (its name is the path relative to the watched directory); nil for the
// ops that describe the watch itself.
func (s *service) fsEvent(ctx context.Context, t target.Target, root string, ev sandbox.FileEvent, withEntry bool) *FilesystemEvent {
	typ, ok := eventTypes[ev.Op]
	if !ok {
		return nil
	}
	name, err := filepath.Rel(root, ev.Path)
	if err != nil {
		name = ev.Path
	}
	out := &FilesystemEvent{Name: name, Type: typ}
	if withEntry && typ != EventRemove && typ != EventRename {
		// What is there now; a file gone again by now has none.
		if f, err := on(s, t, func(sb *live.Sandbox) (sandbox.SandboxFile, error) { return sb.StatFile(ctx, ev.Path) }); err == nil {
			out.Entry = entryInfo(f)
		}
	}
	return out
}

// watchDir streams the changes under a directory until the client goes,
// its deadline passes, or the watch ends by itself (the directory went, or
// the sandbox): then the stream ends.
func (s *service) watchDir(ctx context.Context, req *connect.Request[WatchDirRequest], st *connect.ServerStream[WatchDirResponse]) error {
	t := tgt(ctx)
	root, err := live.SandboxPath(home(req.Msg.Path))
	if err != nil {
		return classify(ctx, err, s.log).connect()
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel() // after stop: a watch waiting on a full queue lets go
	q := stream.NewQueue[sandbox.FileEvent](watchBacklog)
	sb, err := s.box(t)
	if err != nil {
		return classify(ctx, err, s.log).connect()
	}
	stop, err := sb.Watch(wctx, root, req.Msg.Recursive, func(ev sandbox.FileEvent) {
		// The watch holds what waits here, up to a bound (then an
		// overflow): waiting is allowed, until the stream ends.
		_ = q.Push(wctx, ev)
		if ev.Op == live.OpEnd {
			q.Close(nil)
		}
	})
	if err != nil {
		return classify(ctx, err, s.log).connect()
	}
	defer func() { _ = stop() }() // why a watch ended is no news to a client that left
	if err := st.Send(&WatchDirResponse{Start: &WatchDirStart{}}); err != nil {
		return err
	}
	keepalive := messages(func() error { return st.Send(&WatchDirResponse{Keepalive: &KeepAlive{}}) })
	return stream.Follow(ctx, q, keepalive, func(ev sandbox.FileEvent) error {
		// The watch's own ops (overflow, end) have no envd form.
		if fe := s.fsEvent(ctx, t, root, ev, req.Msg.IncludeEntry); fe != nil {
			return st.Send(&WatchDirResponse{Filesystem: fe})
		}
		return nil
	}, s.keepaliveEvery(req.Header()))
}

// watchBacklog bounds the events a WatchDir stream holds for a slow
// client; beyond it the watch holds them, up to its own bound
// (internal/agent).
const watchBacklog = 64

// Watchers made by CreateWatcher are polled with GetWatcherEvents (E2B's
// synchronous Python SDK watches this way).
const (
	maxWatchers       = 32   // per sandbox
	maxWatcherBacklog = 4096 // events a watcher holds for its poller
	// endedWatcherKeep is how long a watcher that ended by itself keeps its
	// last events for a poller.
	endedWatcherKeep = time.Minute
)

type watcher struct {
	t            target.Target
	root         string
	includeEntry bool
	stop         func() error

	mu     sync.Mutex
	events []sandbox.FileEvent
	lost   bool // events were dropped past the backlog
	ended  bool
}

func (s *service) createWatcher(ctx context.Context, req *connect.Request[CreateWatcherRequest]) (*connect.Response[CreateWatcherResponse], error) {
	t := tgt(ctx)
	root, err := live.SandboxPath(home(req.Msg.Path))
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	s.mu.Lock()
	n := 0
	for _, w := range s.watchers {
		if w.t == t {
			n++
		}
	}
	s.mu.Unlock()
	if n >= maxWatchers {
		return nil, refuse(fault.ResourceExhausted, "the sandbox has as many watchers as it may; remove one")
	}
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	id := hex.EncodeToString(b[:])
	w := &watcher{t: t, root: root, includeEntry: req.Msg.IncludeEntry}
	// The watch outlives this call: it lasts until RemoveWatcher, or until
	// it ends by itself (its directory goes, or the sandbox).
	sb, err := s.box(t)
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	stop, err := sb.Watch(context.WithoutCancel(ctx), root, req.Msg.Recursive, func(ev sandbox.FileEvent) {
		w.mu.Lock()
		defer w.mu.Unlock()
		switch {
		case ev.Op == live.OpEnd:
			w.ended = true
			time.AfterFunc(endedWatcherKeep, func() { s.dropWatcher(id) })
		case len(w.events) >= maxWatcherBacklog:
			w.lost = true
		default:
			w.events = append(w.events, ev)
		}
	})
	if err != nil {
		return nil, classify(ctx, err, s.log).connect()
	}
	w.stop = stop
	s.mu.Lock()
	s.watchers[id] = w
	s.mu.Unlock()
	return connect.NewResponse(&CreateWatcherResponse{WatcherID: id}), nil
}

// watcher returns t's watcher id (another sandbox's is not found).
func (s *service) watcher(t target.Target, id string) (*watcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.watchers[id]
	if !ok || w.t != t {
		return nil, refuse(fault.NotFound, "no such watcher (a watcher whose directory or sandbox went is removed a minute later)")
	}
	return w, nil
}

func (s *service) dropWatcher(id string) {
	s.mu.Lock()
	w := s.watchers[id]
	delete(s.watchers, id)
	s.mu.Unlock()
	if w != nil {
		_ = w.stop() // why it ended is no news: it is being removed
	}
}

func (s *service) getWatcherEvents(ctx context.Context, req *connect.Request[GetWatcherEventsRequest]) (*connect.Response[GetWatcherEventsResponse], error) {
	t := tgt(ctx)
	w, err := s.watcher(t, req.Msg.WatcherID)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	evs, lost, ended := w.events, w.lost, w.ended
	w.events, w.lost = nil, false
	w.mu.Unlock()
	if lost {
		return nil, refuse(fault.ResourceExhausted,
			"the watcher held as many events as it may and dropped later ones; list the directory again")
	}
	out := &GetWatcherEventsResponse{Events: []FilesystemEvent{}}
	for _, ev := range evs {
		if fe := s.fsEvent(ctx, t, w.root, ev, w.includeEntry); fe != nil {
			out.Events = append(out.Events, *fe)
		}
	}
	if ended && len(evs) == 0 {
		s.dropWatcher(req.Msg.WatcherID)
		return nil, refuse(fault.NotFound, "the watch ended: its directory, or the sandbox, is gone")
	}
	return connect.NewResponse(out), nil
}

func (s *service) removeWatcher(ctx context.Context, req *connect.Request[RemoveWatcherRequest]) (*connect.Response[RemoveWatcherResponse], error) {
	t := tgt(ctx)
	if _, err := s.watcher(t, req.Msg.WatcherID); err != nil {
		return nil, err
	}
	s.dropWatcher(req.Msg.WatcherID)
	return connect.NewResponse(&RemoveWatcherResponse{}), nil
}

// home resolves a relative path of E2B's against live.UserHome; an absolute or
// empty one is the caller's to check.
func home(p string) string {
	if p == "" || strings.HasPrefix(p, "/") {
		return p
	}
	return path.Join(live.UserHome, p)
}
