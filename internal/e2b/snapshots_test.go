package e2b

import (
	"net/http"
	"strings"
	"testing"
)

// TestSnapshots takes snapshots through E2B's REST wire as the stock
// SDKs call it (over the fake runtime: the wire; test/e2b runs the SDKs
// on the real runtimes): createSnapshot's {snapshotID, names}, the
// listing's paging by X-Next-Token and its filters, a create whose
// templateID is the snapshot's id or name, fork's one result per fork
// with an access token each, deleteSnapshot's DELETE /templates/{id}
// (204, then 404), and another tenant's 404s.
func TestSnapshots(t *testing.T) {
	u := newUnit(t, "")
	c := u.create(keyA, `{"templateID":"base","timeout":300}`)
	var first, second snapshotInfo
	u.call(keyA, "POST", "/sandboxes/"+c.SandboxID+"/snapshots", `{"name":"mine"}`, http.StatusCreated, &first)
	if !strings.HasPrefix(first.SnapshotID, "snap_") || len(first.Names) != 1 || first.Names[0] != "mine" {
		t.Fatalf("createSnapshot: %+v", first)
	}
	u.call(keyA, "POST", "/sandboxes/"+c.SandboxID+"/snapshots", `{}`, http.StatusCreated, &second)
	if second.Names == nil || len(second.Names) != 0 {
		t.Errorf("an unnamed snapshot's names: %#v, want []", second.Names)
	}

	var page []snapshotInfo
	h := u.call(keyA, "GET", "/snapshots?limit=1&sandboxID="+c.SandboxID, "", http.StatusOK, &page)
	next := h.Get("X-Next-Token")
	if len(page) != 1 || page[0].SnapshotID != second.SnapshotID || next == "" {
		t.Fatalf("first page: %+v, next %q", page, next)
	}
	h = u.call(keyA, "GET", "/snapshots?limit=1&nextToken="+next, "", http.StatusOK, &page)
	if len(page) != 1 || page[0].SnapshotID != first.SnapshotID || h.Get("X-Next-Token") != "" {
		t.Errorf("second page: %+v, next %q", page, h.Get("X-Next-Token"))
	}
	u.call(keyA, "GET", "/snapshots?name=team%2Fmine%3Adefault", "", http.StatusOK, &page)
	if len(page) != 1 || page[0].SnapshotID != first.SnapshotID {
		t.Errorf("by name: %+v", page)
	}
	u.call(keyB, "GET", "/snapshots", "", http.StatusOK, &page)
	if len(page) != 0 {
		t.Errorf("another tenant lists %+v", page)
	}
	code, b, _ := u.do("GET", "/snapshots?nextToken=x", "", "X-API-Key", keyA)
	e2bError(t, "a token not given", code, b, http.StatusBadRequest)

	// Sandbox.create(snapshotId), and by name.
	for _, template := range []string{first.SnapshotID, "mine"} {
		made := u.create(keyA, `{"templateID":"`+template+`","timeout":60}`)
		if made.SandboxID == c.SandboxID || made.EnvdAccessToken == "" {
			t.Errorf("create from %s: %+v", template, made)
		}
	}
	code, b, _ = u.do("POST", "/v2/sandboxes", `{"templateID":"`+first.SnapshotID+`"}`, "X-API-Key", keyB)
	e2bError(t, "another tenant's create from it", code, b, http.StatusNotFound)
	code, b, _ = u.do("POST", "/v2/sandboxes", `{"templateID":"no-such-thing"}`, "X-API-Key", keyA)
	e2bError(t, "a template that is neither an image nor a snapshot", code, b, http.StatusNotFound)

	// fork: one result per fork, each with its token.
	var forks []forkResult
	u.call(keyA, "POST", "/sandboxes/"+c.SandboxID+"/fork", `{"count":2,"timeout":60}`, http.StatusCreated, &forks)
	if len(forks) != 2 {
		t.Fatalf("forks: %+v", forks)
	}
	for _, f := range forks {
		if f.Error != nil || f.Sandbox == nil || f.Sandbox.EnvdAccessToken == "" || f.Sandbox.SandboxID == c.SandboxID {
			t.Errorf("fork: %+v", f)
		}
	}
	code, b, _ = u.do("POST", "/sandboxes/"+c.SandboxID+"/fork", `{"count":17}`, "X-API-Key", keyA)
	e2bError(t, "a fork of 17", code, b, http.StatusBadRequest)
	code, b, _ = u.do("POST", "/sandboxes/"+c.SandboxID+"/fork", `{}`, "X-API-Key", keyB)
	e2bError(t, "another tenant's fork", code, b, http.StatusNotFound)
	code, b, _ = u.do("POST", "/sandboxes/"+c.SandboxID+"/snapshots", `{}`, "X-API-Key", keyB)
	e2bError(t, "another tenant's snapshot", code, b, http.StatusNotFound)
	code, b, _ = u.do("POST", "/sandboxes/"+c.SandboxID+"/snapshots", `{"name":"../x"}`, "X-API-Key", keyA)
	e2bError(t, "a hostile name", code, b, http.StatusBadRequest)

	// deleteSnapshot: 204, then 404; another tenant's is 404.
	code, b, _ = u.do("DELETE", "/templates/"+first.SnapshotID, "", "X-API-Key", keyB)
	e2bError(t, "another tenant's delete", code, b, http.StatusNotFound)
	u.call(keyA, "DELETE", "/templates/"+first.SnapshotID, "", http.StatusNoContent, nil)
	code, b, _ = u.do("DELETE", "/templates/"+first.SnapshotID, "", "X-API-Key", keyA)
	e2bError(t, "a delete again", code, b, http.StatusNotFound)
	code, b, _ = u.do("DELETE", "/templates/base", "", "X-API-Key", keyA)
	e2bError(t, "a template that is an image", code, b, http.StatusNotFound)
}
