package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// AuditSource reads the audit trail; store.Store is one.
type AuditSource interface {
	ListAudit(ctx context.Context, tenant string, q store.AuditQuery) ([]sandbox.AuditEvent, string, error)
}

// auditHandler answers GET /v1/audit: the caller's tenant's events, oldest
// first, filtered and paged. The store is shared by every node: no call is
// forwarded.
func (s *Server) auditHandler(w http.ResponseWriter, r *http.Request, t *Tenant) {
	if s.auditLog == nil {
		writeError(w, notFound("the audit trail is not kept by this server (set [audit] enabled = true)"))
		return
	}
	q, qerr := parseAuditQuery(r)
	if qerr != nil {
		writeError(w, qerr)
		return
	}
	events, next, err := s.auditLog.ListAudit(r.Context(), t.Name, q)
	if errors.Is(err, store.ErrInvalid) {
		// The filters were checked above: what the store judges is the
		// cursor.
		writeError(w, refuse("cursor", "is not a cursor this server handed out"))
		return
	}
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	if events == nil {
		events = []sandbox.AuditEvent{}
	}
	writeJSON(w, http.StatusOK, sandbox.AuditPage{Events: events, NextCursor: next})
}

func parseAuditQuery(r *http.Request) (store.AuditQuery, *Error) {
	v := r.URL.Query()
	bad := func(field, msg string) (store.AuditQuery, *Error) {
		return store.AuditQuery{}, refuse(field, msg)
	}
	q := store.AuditQuery{SandboxID: v.Get("sandbox_id"), ExecutionID: v.Get("execution_id"), Action: v.Get("action"),
		KeyID: v.Get("key_id"), Cursor: v.Get("cursor")}
	for _, f := range []struct{ name, value string }{{"sandbox_id", q.SandboxID}, {"execution_id", q.ExecutionID}} {
		if f.value != "" && !validate.ValidID(f.value) {
			return bad(f.name, "is not a valid id")
		}
	}
	for _, f := range []struct{ name, value string }{{"action", q.Action}, {"key_id", q.KeyID}} {
		if len(f.value) > 128 || !printable(f.value) {
			return bad(f.name, "must be at most 128 printable ASCII characters")
		}
	}
	if len(q.Cursor) > 512 {
		return bad("cursor", "is too long")
	}
	var e *Error
	if q.Limit, q.Since, q.Until, e = listWindow(v); e != nil {
		return store.AuditQuery{}, e
	}
	return q, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
