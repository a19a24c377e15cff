package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// sessionBody is the optional body of PUT /v1/sessions/{id}.
type sessionBody struct {
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	DiskMB     int64 `json:"disk_mb,omitempty"`
}

func (s *Server) sessionID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if s.sessions == nil {
		writeError(w, notFound("sessions are not enabled on this server"))
		return "", false
	}
	if !validate.ValidID(id) {
		writeError(w, notFound("no such session"))
		return "", false
	}
	return id, true
}

// Session calls that do more than reach the session's node.
const (
	// claimSession: a session no node owns becomes this node's (the
	// calls that create sessions).
	claimSession = 1 << iota
	// forgetLost: a session lost with its node is forgotten (deleting
	// it), so its id is free again.
	forgetLost
	// sandboxCall: a call about a live sandbox (/v1/sandboxes, E2B's): an
	// owner gone or not answering is the sandbox's (sandbox_lost,
	// sandbox_unavailable), not a session's.
	sandboxCall
)

// route sends a session's call to the node that owns the session. It
// reports whether this node serves r itself; if not, r was forwarded or
// answered.
func (s *Server) route(w http.ResponseWriter, r *http.Request, t *Tenant, id string, how int) bool {
	return s.routeAs(w, r, t.Name, id, how, s.fail)
}

// RouteSandbox sends a call about tenant's sandbox id to the node that
// owns it, as route does for /v1 (internal/e2b's calls). It reports
// whether this node serves r itself; if not, r was forwarded, or answered
// by fail with the error (an owner's is the sandbox's: sandbox_lost,
// sandbox_unavailable), or (forget: a delete) answered 204 for a sandbox
// lost with its node, now forgotten.
func (s *Server) RouteSandbox(w http.ResponseWriter, r *http.Request, tenant, id string, forget bool,
	fail func(w http.ResponseWriter, err error)) bool {
	how := sandboxCall
	if forget {
		how |= forgetLost
	}
	return s.routeAs(w, r, tenant, id, how, fail)
}

func (s *Server) routeAs(w http.ResponseWriter, r *http.Request, tenant, id string, how int, fail func(http.ResponseWriter, error)) bool {
	moves := how&sandboxCall != 0 && s.live != nil
	if moves {
		// A sandbox arriving on this node or leaving it: its move ends
		// first, and one that left is routed anew.
		left, err := s.live.Settle(r.Context(), tenant, id)
		if err != nil {
			fail(w, err)
			return false
		}
		if left && s.cluster != nil {
			return s.routeLeft(w, r, tenant, id, fail)
		}
	}
	if s.cluster == nil {
		return true
	}
	if cluster.Forwarded(r) {
		if moves && !s.live.Has(tenant, id) && s.live.Movable() {
			return s.routeSent(w, r, tenant, id, how, fail)
		}
		return true
	}
	// An owner's error on a call about a live sandbox is the sandbox's.
	failed := func(w http.ResponseWriter, err error) {
		var se *cluster.OwnerError
		if how&sandboxCall != 0 && errors.As(err, &se) {
			err = se.FaultAs("sandbox")
		}
		fail(w, err)
	}
	for try := 0; ; try++ {
		owner, se, err := s.ownerOf(r, tenant, id, how)
		if se != nil && moves && try < 2 && (se.HandedOff || se.Lost) {
			// Handed off by a drain, or lost paused: taken over here from
			// the snapshot store, if it is there.
			took, terr := s.takeOver(r, tenant, id, se)
			switch {
			case took:
				return true
			case errors.Is(terr, live.ErrElsewhere):
				continue // another node took it first: routed to it
			case errors.Is(terr, live.ErrDraining):
				return s.routeLeft(w, r, tenant, id, fail)
			case terr != nil:
				fail(w, terr)
				return false
			}
		}
		switch {
		case errors.Is(err, cluster.ErrNoOwner):
			return true // this node answers that there is none
		case se != nil && se.Lost && how&forgetLost != 0:
			// Deleting a lost session: its files went with its node; the id
			// is free again.
			if err := s.cluster.Forget(r.Context(), se); err != nil {
				failed(w, err)
				return false
			}
			w.WriteHeader(http.StatusNoContent)
			return false
		case err != nil:
			failed(w, err)
			return false
		case owner.Local:
			if moves {
				// It may be arriving (a takeover under way on this node).
				if _, err := s.live.Settle(r.Context(), tenant, id); err != nil {
					fail(w, err)
					return false
				}
			}
			return true
		}
		s.cluster.Forward(w, r, tenant, id, owner, failed)
		return false
	}
}

// routeSent routes a call another node sent here for a sandbox this node
// does not hold: sent by a node it left (a drain), it is taken over here
// if it is in the snapshot store, or sent on to the node that took it
// over meanwhile. It reports whether this node serves r itself.
func (s *Server) routeSent(w http.ResponseWriter, r *http.Request, tenant, id string, how int, fail func(http.ResponseWriter, error)) bool {
	for range 2 {
		owner, se, err := s.ownerOf(r, tenant, id, how)
		switch {
		case se != nil:
			_, err := s.takeOver(r, tenant, id, se)
			if errors.Is(err, live.ErrElsewhere) {
				continue // another node took it first: sent on to it
			}
			if err != nil {
				s.log.Warn("take over a sandbox sent here by another node", "sandbox", id, "err", err)
			}
			return true
		case err == nil && !owner.Local && owner.Node.ID != r.Header.Get(cluster.ForwardedHeader):
			s.cluster.Forward(w, r, tenant, id, owner, fail)
			return false
		case err != nil && !errors.Is(err, cluster.ErrNoOwner):
			s.log.Warn("find the owner of a sandbox sent here by another node", "sandbox", id, "err", err)
		}
		return true
	}
	return true
}

// ownerOf returns the owner of (tenant, id), and the owner's error apart
// when there is one.
func (s *Server) ownerOf(r *http.Request, tenant, id string, how int) (cluster.Owner, *cluster.OwnerError, error) {
	owner, err := s.cluster.OwnerOf(r.Context(), tenant, id, how&claimSession != 0)
	var se *cluster.OwnerError
	if errors.As(err, &se) {
		return owner, se, err
	}
	return owner, nil, err
}

// takeOver takes tenant's sandbox id over on this node from the owner se
// names, when that owner published it paused as a snapshot (live.Manager.
// TakeOver); false, nil when it did not (the owner's error stands).
func (s *Server) takeOver(r *http.Request, tenant, id string, se *cluster.OwnerError) (bool, error) {
	if !s.live.Movable() {
		return false, nil
	}
	pub, err := s.cluster.Published(r.Context(), tenant, id)
	if errors.Is(err, cluster.ErrNoOwner) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var info sandbox.Info
	if err := json.Unmarshal(pub.Info, &info); err != nil || pub.Node != se.Node || info.Pause == nil || info.Pause.SnapshotID == "" {
		return false, nil
	}
	if err := s.live.TakeOver(r.Context(), tenant, id, se.Node, info.Pause.SnapshotID); err != nil {
		return false, err
	}
	return true, nil
}

// routeLeft sends a call about a sandbox that left this node (a drain
// handed it off) to its new owner, or, while none has taken it, to
// another node, which takes it over: the node that sent the call here if
// one did, else any that beats.
func (s *Server) routeLeft(w http.ResponseWriter, r *http.Request, tenant, id string, fail func(http.ResponseWriter, error)) bool {
	failed := func(w http.ResponseWriter, err error) {
		var se *cluster.OwnerError
		if errors.As(err, &se) {
			err = se.FaultAs("sandbox")
		}
		fail(w, err)
	}
	owner, se, err := s.ownerOf(r, tenant, id, sandboxCall)
	switch {
	case se != nil && se.HandedOff:
		peer, perr := s.cluster.Peer(r.Context(), r.Header.Get(cluster.ForwardedHeader))
		if perr != nil {
			failed(w, se)
			return false
		}
		owner = peer
	case err != nil:
		failed(w, err)
		return false
	case owner.Local:
		return true
	}
	s.cluster.Forward(w, r, tenant, id, owner, failed)
	return false
}

func (s *Server) touchSession(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	if !s.route(w, r, t, id, claimSession) {
		return
	}
	var body sessionBody
	if !s.decode(w, r, &body) {
		return
	}
	info, created, err := s.sessions.Touch(r.Context(), t.Name, id, session.Options{
		TTL: validate.Duration(body.TTLSeconds, time.Second), DiskMB: body.DiskMB})
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, info)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	if !s.route(w, r, t, id, 0) {
		return
	}
	info, err := s.sessions.Get(t.Name, id)
	s.reply(w, http.StatusOK, info, err)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	if !s.route(w, r, t, id, forgetLost) {
		return
	}
	s.reply(w, http.StatusNoContent, nil, s.sessions.Delete(r.Context(), t.Name, id))
}

// listing answers GET on a directory of a session's workspace.
type listing struct {
	Path    string        `json:"path"`
	Entries []agent.Entry `json:"entries"`
}

// getFile downloads a file, or lists a directory, of a session's workspace.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	if !s.route(w, r, t, id, 0) {
		return
	}
	p := strings.TrimSuffix(r.PathValue("path"), "/")
	if _, err := s.sessions.Get(t.Name, id); err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	entries, err := s.sessions.List(r.Context(), t.Name, id, p)
	if err == nil {
		if entries == nil {
			entries = []agent.Entry{}
		}
		writeJSON(w, http.StatusOK, listing{Path: p, Entries: entries})
		return
	}
	// Not a directory is the agent's answer for a file; anything else is
	// the answer to give.
	if _, refused := live.Refusal(err); !refused || !errors.Is(err, syscall.ENOTDIR) {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	// Not a directory: a file, streamed as it is read.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "sandbox")
	cw := &committingWriter{w: w}
	err = s.sessions.Download(r.Context(), t.Name, id, p, cw)
	if err != nil && !cw.started {
		w.Header().Del("Content-Type")
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	if err != nil {
		s.log.WarnContext(r.Context(), "session download cut short", "session", id, "err", err)
	}
}

// committingWriter remembers whether a body has started, after which an
// error can no longer become a JSON answer.
type committingWriter struct {
	w       http.ResponseWriter
	started bool
}

func (c *committingWriter) Write(p []byte) (int, error) {
	if !c.started {
		c.started = true
		c.w.WriteHeader(http.StatusOK)
	}
	return c.w.Write(p)
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	if !s.route(w, r, t, id, claimSession) {
		return
	}
	err := s.sessions.Upload(r.Context(), t.Name, id, r.PathValue("path"), httpbody.Reader(w, r, httpbody.MaxFile))
	s.reply(w, http.StatusNoContent, nil, err)
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sessionID(w, r)
	if !ok {
		return
	}
	if !s.route(w, r, t, id, 0) {
		return
	}
	s.reply(w, http.StatusNoContent, nil, s.sessions.Remove(r.Context(), t.Name, id, r.PathValue("path")))
}
