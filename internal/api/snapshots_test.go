package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/sandbox"
)

// snapshotStore is a snapshot store in a directory of t's own.
func snapshotStore(t *testing.T) *snapshot.Store {
	t.Helper()
	b, err := local.New(t.TempDir(), "http://127.0.0.1:1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := snapshot.New(b, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); b.Close() })
	return s
}

// TestSnapshotRoutes takes snapshots of a sandbox through /v1 (over the
// fake runtime: the routes, not what a snapshot keeps, which
// internal/live's sandbox tests check on the real runtimes): the create's
// answer and Location, the tenant's listing paged by cursor and by
// sandbox, a get by id and by name, another tenant's 404 on every route,
// a sandbox made from one and its refusals, a fork to 2 and its bound,
// the delete; refusals of hostile names and ids are 400s. Without a
// snapshot store the routes are 501.
func TestSnapshotRoutes(t *testing.T) {
	s := newStack(t, func(o *options) { o.idle = true; o.live.Snapshots = snapshotStore(t) })
	s.createBox(keyAlpha, "box", nil)
	s.createBox(keyAlpha, "other", nil)
	take := func(id, name string) sandbox.Snapshot {
		t.Helper()
		var sn sandbox.Snapshot
		r := s.call(keyAlpha, "POST", "/v1/sandboxes/"+id+"/snapshots", jsonOf(t, sandbox.CreateSnapshotRequest{Name: name}), http.StatusCreated, &sn)
		if !strings.HasPrefix(sn.SnapshotID, "snap_") || sn.SandboxID != id || sn.Name != name || sn.Memory || sn.Tier != "container" {
			t.Fatalf("snapshot: %+v", sn)
		}
		if loc := r.header.Get("Location"); loc != "/v1/snapshots/"+sn.SnapshotID {
			t.Errorf("Location %q", loc)
		}
		return sn
	}
	first := take("box", "one")
	second := take("box", "")
	third := take("other", "three")

	var page sandbox.SnapshotList
	s.call(keyAlpha, "GET", "/v1/snapshots?limit=2", "", http.StatusOK, &page)
	got := joined(page.Snapshots, func(x sandbox.Snapshot) string { return x.SnapshotID })
	if got != third.SnapshotID+","+second.SnapshotID || page.NextCursor == "" {
		t.Fatalf("first page: %s, cursor %q", got, page.NextCursor)
	}
	var rest sandbox.SnapshotList
	s.call(keyAlpha, "GET", "/v1/snapshots?limit=2&cursor="+url.QueryEscape(page.NextCursor), "", http.StatusOK, &rest)
	if got := joined(rest.Snapshots, func(x sandbox.Snapshot) string { return x.SnapshotID }); got != first.SnapshotID || rest.NextCursor != "" {
		t.Errorf("second page: %s, cursor %q", got, rest.NextCursor)
	}
	var of sandbox.SnapshotList
	s.call(keyAlpha, "GET", "/v1/snapshots?sandbox_id=other", "", http.StatusOK, &of)
	if len(of.Snapshots) != 1 || of.Snapshots[0].SnapshotID != third.SnapshotID {
		t.Errorf("of other: %+v", of)
	}
	var byName sandbox.Snapshot
	s.call(keyAlpha, "GET", "/v1/snapshots/one", "", http.StatusOK, &byName)
	if byName.SnapshotID != first.SnapshotID {
		t.Errorf("by name: %+v", byName)
	}

	// Another tenant's: none of it.
	var none sandbox.SnapshotList
	s.call(keyBeta, "GET", "/v1/snapshots", "", http.StatusOK, &none)
	if len(none.Snapshots) != 0 {
		t.Errorf("beta lists %+v", none)
	}
	s.fail(keyBeta, "GET", "/v1/snapshots/"+first.SnapshotID, "", http.StatusNotFound, "not_found")
	s.fail(keyBeta, "DELETE", "/v1/snapshots/"+first.SnapshotID, "", http.StatusNotFound, "not_found")
	s.fail(keyBeta, "POST", "/v1/sandboxes", jsonOf(t, sandbox.CreateSandboxRequest{SnapshotID: first.SnapshotID}), http.StatusNotFound, "not_found")
	s.fail(keyBeta, "POST", "/v1/sandboxes/box/snapshots", "{}", http.StatusNotFound, "not_found")

	// A sandbox made from one: by name, the request's id and metadata.
	var made sandbox.Info
	s.call(keyAlpha, "POST", "/v1/sandboxes", jsonOf(t, sandbox.CreateSandboxRequest{SandboxID: "copy", SnapshotID: "one",
		Metadata: map[string]string{"from": "one"}}), http.StatusCreated, &made)
	if made.SandboxID != "copy" || made.State != "running" || made.Metadata["from"] != "one" || made.Tier != "container" {
		t.Errorf("made from a snapshot: %+v", made)
	}
	s.fail(keyAlpha, "POST", "/v1/sandboxes", jsonOf(t, sandbox.CreateSandboxRequest{SandboxID: "copy", SnapshotID: "one"}), http.StatusConflict, "conflict")
	if e, _ := s.fail(keyAlpha, "POST", "/v1/sandboxes", jsonOf(t, sandbox.CreateSandboxRequest{SnapshotID: "one", Tier: "gvisor"}),
		http.StatusBadRequest, "invalid_request"); e.Field != "tier" {
		t.Errorf("another tier: field %q", e.Field)
	}
	s.fail(keyAlpha, "POST", "/v1/sandboxes", jsonOf(t, sandbox.CreateSandboxRequest{SnapshotID: "nope"}), http.StatusNotFound, "not_found")

	// Fork.
	var forks sandbox.ForkAnswer
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/fork", `{"count": 2, "timeout_seconds": 60}`, http.StatusCreated, &forks)
	if len(forks.Forks) != 2 {
		t.Fatalf("forks: %+v", forks)
	}
	for _, f := range forks.Forks {
		if f.Sandbox == nil || f.Error != nil || f.Sandbox.TimeoutSeconds != 60 {
			t.Errorf("fork: %+v", f)
		}
	}
	var after sandbox.SnapshotList
	s.call(keyAlpha, "GET", "/v1/snapshots", "", http.StatusOK, &after)
	if len(after.Snapshots) != 3 {
		t.Errorf("the fork's snapshot is listed: %d snapshots", len(after.Snapshots))
	}
	for _, body := range []string{`{"count": 17}`, `{"count": -1}`, `{"timeout_seconds": -5}`} {
		s.fail(keyAlpha, "POST", "/v1/sandboxes/box/fork", body, http.StatusBadRequest, "invalid_request")
	}
	s.fail(keyAlpha, "POST", "/v1/sandboxes/nope/fork", "{}", http.StatusNotFound, "not_found")

	// Hostile names, ids and cursors.
	for _, name := range []string{"../x", "snap_x", strings.Repeat("a", 65), "a b", "-a"} {
		if e, _ := s.fail(keyAlpha, "POST", "/v1/sandboxes/box/snapshots", jsonOf(t, sandbox.CreateSnapshotRequest{Name: name}),
			http.StatusBadRequest, "invalid_request"); e.Field != "name" {
			t.Errorf("name %q: field %q", name, e.Field)
		}
	}
	for _, id := range []string{"a%2F..", "%00", strings.Repeat("a", 200)} {
		s.fail(keyAlpha, "GET", "/v1/snapshots/"+id, "", http.StatusBadRequest, "invalid_request")
	}
	s.fail(keyAlpha, "GET", "/v1/snapshots?cursor=x", "", http.StatusBadRequest, "invalid_request")
	s.fail(keyAlpha, "GET", "/v1/snapshots?limit=0", "", http.StatusBadRequest, "invalid_request")

	// Delete: by id; gone then; the sandbox made from it lives on.
	s.call(keyAlpha, "DELETE", "/v1/snapshots/"+first.SnapshotID, "", http.StatusNoContent, nil)
	s.fail(keyAlpha, "GET", "/v1/snapshots/"+first.SnapshotID, "", http.StatusNotFound, "not_found")
	s.fail(keyAlpha, "GET", "/v1/snapshots/one", "", http.StatusNotFound, "not_found")
	s.call(keyAlpha, "GET", "/v1/sandboxes/copy", "", http.StatusOK, nil)

	// No store: 501.
	n := newStack(t, func(o *options) { o.idle = true })
	n.createBox(keyAlpha, "box", nil)
	n.fail(keyAlpha, "POST", "/v1/sandboxes/box/snapshots", "{}", http.StatusNotImplemented, "not_implemented")
	n.fail(keyAlpha, "GET", "/v1/snapshots", "", http.StatusNotImplemented, "not_implemented")
}
