package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// submitted is the answer to an asynchronous submit.
type submitted struct {
	ExecutionID string         `json:"execution_id"`
	Status      sandbox.Status `json:"status"`
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request, t *Tenant) {
	body, err := httpbody.Read(w, r, s.cfg.MaxBodyBytes)
	var req sandbox.ExecuteRequest
	if err == nil {
		req, err = parseExecuteRequest(body)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	if req.SessionID != "" && validate.ValidID(req.SessionID) {
		// A session's executions are submitted on the node that owns
		// it, which answers (and waits) for them.
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if !s.route(w, r, t, req.SessionID, claimSession) {
			return
		}
	}
	if req.CallbackURL != "" && len(t.CallbackSecret) == 0 {
		writeError(w, refuse("callback_url", "callbacks need a callback secret configured for this tenant"))
		return
	}
	wait, err := queryBool(r, "wait")
	if err != nil {
		s.fail(w, err)
		return
	}
	sub, err := s.node.Submit(r.Context(), t.Name, req)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	rec := sub.Execution.Record
	if !wait || rec.Status.Final() {
		if wait {
			s.writeRecord(w, r, t, rec.ExecutionID)
			return
		}
		writeJSON(w, http.StatusAccepted, submitted{ExecutionID: rec.ExecutionID, Status: rec.Status})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.node.WaitDeadline(rec.Limits))
	defer cancel()
	res, err := s.node.Wait(ctx, t.Name, rec.ExecutionID)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	if !res.Status.Final() {
		// The client's patience or ours ran out first: the execution goes
		// on and can be fetched later.
		writeJSON(w, http.StatusAccepted, submitted{ExecutionID: res.ExecutionID, Status: res.Status})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) writeRecord(w http.ResponseWriter, r *http.Request, t *Tenant, id string) {
	res, err := s.node.Get(r.Context(), t.Name, id)
	s.reply(w, http.StatusOK, res, err)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id := r.PathValue("id")
	if !validate.ValidID(id) {
		writeError(w, asError(r.Context(), errNotFound(), s.log))
		return
	}
	s.writeRecord(w, r, t, id)
}

func errNotFound() *Error { return notFound("no such execution") }

func (s *Server) cancel(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id := r.PathValue("id")
	if !validate.ValidID(id) {
		writeError(w, errNotFound())
		return
	}
	res, err := s.node.Cancel(r.Context(), t.Name, id)
	s.reply(w, http.StatusOK, res, err)
}

// listed is the answer of the query endpoint.
type listed struct {
	Executions []sandbox.Result `json:"executions"`
	NextCursor string           `json:"next_cursor,omitempty"`
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, t *Tenant) {
	q, qerr := parseQuery(r)
	if qerr != nil {
		writeError(w, qerr)
		return
	}
	res, next, err := s.node.List(r.Context(), t.Name, q)
	if errors.Is(err, store.ErrInvalid) {
		// The only input the store judges here is the cursor.
		writeError(w, refuse("cursor", "is not a cursor this server handed out for this sort"))
		return
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	if res == nil {
		res = []sandbox.Result{}
	}
	writeJSON(w, http.StatusOK, listed{Executions: res, NextCursor: next})
}

var (
	statuses = map[sandbox.Status]bool{sandbox.StatusQueued: true, sandbox.StatusRunning: true,
		sandbox.StatusSuccess: true, sandbox.StatusFailed: true, sandbox.StatusCancelled: true}
	errorTypes = map[sandbox.ErrorType]bool{sandbox.ErrCompile: true, sandbox.ErrRuntime: true, sandbox.ErrTimeout: true,
		sandbox.ErrOOM: true, sandbox.ErrResourceLimit: true, sandbox.ErrInternal: true, sandbox.ErrInput: true, sandbox.ErrCancelled: true}
	sorts = map[string]bool{"created_at": true, "-created_at": true, "duration_ms": true, "-duration_ms": true}
)

func parseQuery(r *http.Request) (store.Query, *Error) {
	v := r.URL.Query()
	bad := func(field, msg string) (store.Query, *Error) {
		return store.Query{}, refuse(field, msg)
	}
	q := store.Query{
		SessionID: v.Get("session_id"),
		Status:    sandbox.Status(v.Get("status")),
		ErrorType: sandbox.ErrorType(v.Get("error_type")),
		Language:  v.Get("language"),
		Sort:      v.Get("sort"),
		Cursor:    v.Get("cursor"),
	}
	if q.SessionID != "" && !validate.ValidID(q.SessionID) {
		return bad("session_id", "is not a valid session id")
	}
	if q.Status != "" && !statuses[q.Status] {
		return bad("status", "must be queued, running, success, failed or cancelled")
	}
	if q.ErrorType != "" && !errorTypes[q.ErrorType] {
		return bad("error_type", "is not an error type")
	}
	if q.Sort != "" && !sorts[q.Sort] {
		return bad("sort", "must be created_at, -created_at, duration_ms or -duration_ms")
	}
	if len(q.Cursor) > 512 {
		return bad("cursor", "is too long")
	}
	if len(q.Language) > 64 {
		return bad("language", "is too long")
	}
	if s := v.Get("exit_code_ne"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return bad("exit_code_ne", "must be an integer")
		}
		q.ExitCodeNe = &n
	}
	var e *Error
	if q.Limit, q.Since, q.Until, e = listWindow(v); e != nil {
		return store.Query{}, e
	}
	return q, nil
}

// egressList answers GET /v1/executions/{id}/egress.
type egressList struct {
	Attempts []sandbox.EgressAttempt `json:"attempts"`
}

func (s *Server) egress(w http.ResponseWriter, r *http.Request, t *Tenant) {
	id := r.PathValue("id")
	if !validate.ValidID(id) {
		writeError(w, errNotFound())
		return
	}
	out, err := s.node.Egress(r.Context(), t.Name, id)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	if out == nil {
		out = []sandbox.EgressAttempt{}
	}
	writeJSON(w, http.StatusOK, egressList{Attempts: out})
}

// listWindow reads what every listing's query shares: limit (1 to 1000,
// 0 when absent), since and until (RFC 3339, zero when absent). The error
// names the field.
func listWindow(v url.Values) (limit int, since, until time.Time, e *Error) {
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			return 0, since, until, refuse("limit", "must be an integer from 1 to 1000")
		}
		limit = n
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"since", &since}, {"until", &until}} {
		if s := v.Get(f.name); s != "" {
			ts, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return 0, since, until, refuse(f.name, "must be an RFC 3339 time")
			}
			*f.dst = ts
		}
	}
	return limit, since, until, nil
}
