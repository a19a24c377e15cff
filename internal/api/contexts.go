package api

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/internal/stream"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// Code contexts of live sandboxes (live.Sandbox.Contexts,
// internal/kernel): create, list, delete, run a cell, restart, fork,
// interrupt.

// maxRunTimeout bounds a cell's timeout_seconds.
const maxRunTimeout = 24 * time.Hour

// runBacklog bounds the events of a cell held for a slow client; beyond
// it the cell waits.
const runBacklog = 64

// contextPath reads a context call's sandbox and context ids and routes
// it to the sandbox's node.
func (s *Server) contextPath(w http.ResponseWriter, r *http.Request, t *Tenant) (string, string, bool) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return "", "", false
	}
	return id, r.PathValue("cid"), true
}

func (s *Server) createContext(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	var req sandbox.ContextRequest
	if !s.decode(w, r, &req) {
		return
	}
	if err := validate.CheckEnv(req.Env); err != nil {
		s.fail(w, err)
		return
	}
	o := kernel.ContextOptions{Language: req.Language, Cwd: req.Cwd}
	if o.Language == "" {
		o.Language = "python"
	}
	for k, v := range req.Env {
		o.Env = append(o.Env, k+"="+v)
	}
	slices.Sort(o.Env)
	k, err := s.contexts(r, t, id)
	var info sandbox.CodeContext
	if err == nil {
		info, err = k.Create(r.Context(), o)
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

func (s *Server) listContexts(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	k, err := s.contexts(r, t, id)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	infos := k.List()
	out := sandbox.ContextList{Contexts: []sandbox.CodeContext{}}
	out.Contexts = append(out.Contexts, infos...)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteContext(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, cid, ok := s.contextPath(w, r, t)
	if !ok {
		return
	}
	k, err := s.contexts(r, t, id)
	if err == nil {
		err = k.Delete(r.Context(), cid)
	}
	s.reply(w, http.StatusNoContent, nil, err)
}

func (s *Server) restartContext(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, cid, ok := s.contextPath(w, r, t)
	if !ok {
		return
	}
	k, err := s.contexts(r, t, id)
	if err == nil {
		err = k.Restart(r.Context(), cid)
	}
	s.reply(w, http.StatusNoContent, nil, err)
}

func (s *Server) interruptContext(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, cid, ok := s.contextPath(w, r, t)
	if !ok {
		return
	}
	k, err := s.contexts(r, t, id)
	if err == nil {
		err = k.Interrupt(r.Context(), cid)
	}
	s.reply(w, http.StatusNoContent, nil, err)
}

func (s *Server) forkContext(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, cid, ok := s.contextPath(w, r, t)
	if !ok {
		return
	}
	k, err := s.contexts(r, t, id)
	var info sandbox.CodeContext
	if err == nil {
		info, err = k.Fork(r.Context(), cid)
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	writeJSON(w, http.StatusCreated, info)
}

// wantsJSON reports whether the client asked for one JSON answer rather
// than an event stream: an Accept of application/json without
// text/event-stream.
func wantsJSON(r *http.Request) bool {
	json, sse := false, false
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "application/json":
			json = true
		case "text/event-stream":
			sse = true
		}
	}
	return json && !sse
}

// runContext runs a cell. It streams the cell's events as Server-Sent
// Events ("event: <type>", "data: <KernelEvent JSON>"), the last
// end_of_execution; with Accept: application/json it answers
// {"events": [...]} once the cell has ended. A run that cannot go on
// after its stream began (its context deleted, the sandbox ended) ends
// the stream with "event: failure" and an error body. A silent cell's
// stream gets a keep-alive comment every keepAlive.
func (s *Server) runContext(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, cid, ok := s.contextPath(w, r, t)
	if !ok {
		return
	}
	var req sandbox.RunCodeRequest
	if !s.decode(w, r, &req) {
		return
	}
	if err := kernel.CheckCode(req.Code); err != nil {
		s.fail(w, err)
		return
	}
	timeout := validate.Duration(req.TimeoutSeconds, time.Second)
	if timeout < 0 || timeout > maxRunTimeout {
		writeError(w, refuse("timeout_seconds", "must be between 0 (none) and 86400"))
		return
	}
	k, err := s.contexts(r, t, id)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	if wantsJSON(r) {
		out := sandbox.ContextEventList{Events: []sandbox.ContextEvent{}}
		err := k.Run(r.Context(), cid, req.Code, timeout, func(ev sandbox.ContextEvent) {
			out.Events = append(out.Events, ev)
		})
		if err != nil {
			if r.Context().Err() != nil {
				return // the client left
			}
			writeError(w, asError(r.Context(), err, s.log))
			return
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	sse, ok := eventStream(w)
	if !ok {
		return
	}
	// The header goes with the first event (stream.SSE), so that a run
	// that cannot start answers with its error's status.
	var seq uint64
	err = stream.Produce(r.Context(), runBacklog, func(ctx context.Context, emit func(sandbox.ContextEvent)) error {
		return k.Run(ctx, cid, req.Code, timeout, emit)
	}, sse, func(ev sandbox.ContextEvent) error {
		seq++
		return sse.Event(seq, ev.Type, ev)
	}, keepAlive)
	switch {
	case err == nil:
	case r.Context().Err() != nil, errors.Is(err, stream.ErrWrite):
		// The client left; the cell was interrupted.
	case !sse.Begun():
		writeError(w, asError(r.Context(), err, s.log))
	default:
		_ = sse.Event(seq+1, "failure", map[string]*Error{"error": asError(r.Context(), err, s.log)})
		_ = sse.Flush()
	}
}
