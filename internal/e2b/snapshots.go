package e2b

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/sandbox"
)

// E2B's snapshots (Sandbox.createSnapshot, listSnapshots, deleteSnapshot,
// Sandbox.create with a snapshot's id as its template, and fork): the
// snapshots of internal/live (snapshots.go). E2B names a snapshot by its
// template id, snapshotID; Corral's is the snapshot's id ("snap_…"),
// and names lists the name it was given. A template that is a snapshot's
// id, or names none of the images but a snapshot of the tenant's, makes
// the sandbox from that snapshot.

// snapshotBody is the body of POST /sandboxes/{id}/snapshots.
type snapshotBody struct {
	Name string `json:"name"`
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// forkBody is E2B's SandboxForkRequest.
type forkBody struct {
	Count   *int   `json:"count"`
	Timeout *int64 `json:"timeout"`
}

// forkResult is E2B's SandboxForkResult: the fork's sandbox, or its
// error.
type forkResult struct {
	Sandbox *created   `json:"sandbox,omitempty"`
	Error   *forkError `json:"error,omitempty"`
}

type forkError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func toSnapshotInfo(sn sandbox.Snapshot) snapshotInfo {
	names := []string{}
	if sn.Name != "" {
		names = append(names, sn.Name)
	}
	return snapshotInfo{SnapshotID: sn.SnapshotID, Names: names}
}

// isSnapshotID reports whether template is a snapshot's id.
func isSnapshotID(template string) bool { return strings.HasPrefix(template, "snap_") }

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	var body snapshotBody
	if !decode(w, r, &body) {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	var sn sandbox.Snapshot
	if err == nil {
		sn, err = sb.CreateSnapshot(r.Context(), body.Name)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, toSnapshotInfo(sn))
}

// listSnapshots answers GET /snapshots: a page of the tenant's snapshots,
// newest first, of sandboxID and of name when given; a next page's token
// is in the X-Next-Token header.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, tenant string) {
	qs := r.URL.Query()
	limit := defaultLimit
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			refuse(w, fault.InvalidArgument, fmt.Sprintf("limit is 1 to %d", maxLimit))
			return
		}
		limit = n
	}
	f := live.SnapshotFilter{SandboxID: qs.Get("sandboxID"), Name: snapshotName(qs.Get("name"))}
	list, next, err := s.cfg.Sandboxes.SnapshotPage(r.Context(), tenant, f, "nextToken", qs.Get("nextToken"), limit)
	if err != nil {
		s.fail(w, err)
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := make([]snapshotInfo, 0, len(list))
	for _, sn := range list {
		out = append(out, toSnapshotInfo(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

// snapshotName is the name E2B's filter names ("team/name:tag" or
// "name"): Corral's names have neither team nor tag.
func snapshotName(v string) string {
	if i := strings.LastIndexByte(v, '/'); i >= 0 {
		v = v[i+1:]
	}
	v, _, _ = strings.Cut(v, ":")
	return v
}

// deleteTemplate answers DELETE /templates/{templateID}, which the SDKs'
// deleteSnapshot calls: a snapshot of the tenant's is deleted (204); any
// other template is not found (404), as the images are the server's.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, tenant string) {
	template := r.PathValue("templateID")
	err := s.cfg.Sandboxes.DeleteSnapshot(r.Context(), tenant, snapshotName(template))
	var f *fault.Error
	if errors.As(err, &f) && (f.Kind == fault.InvalidArgument || f.Kind == fault.NotFound) {
		refuse(w, fault.NotFound, fmt.Sprintf("template '%s' not found", template))
		return
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fork answers POST /sandboxes/{id}/fork: count (1 to live.MaxForks)
// sandboxes made from one snapshot of the sandbox, each with its access
// token; one result per fork.
func (s *Server) fork(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	var body forkBody
	if !decode(w, r, &body) {
		return
	}
	timeout, ok := timeoutOf(w, body.Timeout)
	if !ok {
		return
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > live.MaxForks {
		refuse(w, fault.InvalidArgument, fmt.Sprintf("count is 1 to %d", live.MaxForks))
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	var forks []live.ForkResult
	if err == nil {
		forks, err = sb.Fork(r.Context(), count, timeout)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	out := make([]forkResult, len(forks))
	for i, f := range forks {
		var token string
		err := f.Err
		if err == nil {
			token = newAccessToken(tenant)
			if fb, gerr := s.cfg.Sandboxes.Get(tenant, f.Info.SandboxID); gerr != nil {
				err = gerr
			} else if err = fb.SetAccessToken(token); err != nil {
				// Nothing of a sandbox no client can reach may stay.
				if kerr := s.cfg.Sandboxes.Kill(r.Context(), tenant, f.Info.SandboxID); kerr != nil {
					s.cfg.Log.Warn("e2b: remove a fork without an access token", "sandbox", f.Info.SandboxID, "err", kerr)
				}
			}
		}
		if err != nil {
			ff := fault.Of(err)
			if ff.Kind == fault.Internal {
				s.cfg.Log.Error("e2b: internal error", "err", err)
			}
			out[i].Error = &forkError{Code: rest.Answer(ff), Message: ff.Message}
			continue
		}
		c := s.created(f.Info, token)
		out[i].Sandbox = &c
	}
	writeJSON(w, http.StatusCreated, out)
}
