package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// Snapshots of live sandboxes (/v1/snapshots, internal/live's
// snapshots.go). Taking one and forking are calls about a sandbox, served
// by its node; listing, describing and deleting read the snapshot store
// every node shares, so any node serves them, as it makes a sandbox from
// one (POST /v1/sandboxes with snapshot_id).

// defaultSnapshotPage is a page of GET /v1/snapshots without limit.
const defaultSnapshotPage = 100

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	var req sandbox.CreateSnapshotRequest
	if !s.decode(w, r, &req) {
		return
	}
	sb, err := s.box(t, id)
	var out sandbox.Snapshot
	if err == nil {
		out, err = sb.CreateSnapshot(r.Context(), req.Name)
	}
	if err == nil {
		w.Header().Set("Location", "/v1/snapshots/"+out.SnapshotID)
	}
	s.reply(w, http.StatusCreated, out, err)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if !s.sandboxesOn(w) {
		return
	}
	q := r.URL.Query()
	limit := defaultSnapshotPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > live.MaxSnapshotPage {
			writeError(w, refuse("limit", "must be an integer from 1 to "+strconv.Itoa(live.MaxSnapshotPage)))
			return
		}
		limit = n
	}
	list, next, err := s.live.SnapshotPage(r.Context(), t.Name, live.SnapshotFilter{SandboxID: q.Get("sandbox_id")}, "cursor", q.Get("cursor"), limit)
	s.reply(w, http.StatusOK, sandbox.SnapshotList{Snapshots: list, NextCursor: next}, err)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if !s.sandboxesOn(w) {
		return
	}
	out, err := s.live.Snapshot(r.Context(), t.Name, r.PathValue("id"))
	s.reply(w, http.StatusOK, out, err)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if !s.sandboxesOn(w) {
		return
	}
	s.reply(w, http.StatusNoContent, nil, s.live.DeleteSnapshot(r.Context(), t.Name, r.PathValue("id")))
}

// forkSandbox makes count sandboxes from one snapshot of a sandbox; the
// answer lists each fork's sandbox or error, in /v1's form.
func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id, ok := s.sandboxRoute(w, r, t, 0)
	if !ok {
		return
	}
	var req sandbox.ForkRequest
	if !s.decode(w, r, &req) {
		return
	}
	sb, err := s.box(t, id)
	var forks []live.ForkResult
	if err == nil {
		forks, err = sb.Fork(r.Context(), req.Count, validate.Duration(req.TimeoutSeconds, time.Second))
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	out := sandbox.ForkAnswer{Forks: make([]sandbox.ForkResult, len(forks))}
	for i, f := range forks {
		if f.Err != nil {
			e := asError(r.Context(), f.Err, s.log)
			out.Forks[i].Error = &sandbox.ForkError{Code: e.Code, Message: e.Message}
			continue
		}
		info := f.Info
		out.Forks[i].Sandbox = &info
	}
	writeJSON(w, http.StatusCreated, out)
}
