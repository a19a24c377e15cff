package api

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestAuditTrail (issue 29, done when 1): a live sandbox driven through
// /v1 — processes, a PTY and its input, file writes, a move and a remove,
// a cell, an egress allowed (with a secret injected) and one denied,
// pause and resume, kill — and an execution: each action is in
// GET /v1/audit with the caller's tenant, key id and sandbox; the other
// tenant sees none of them; the chain verifies.
func TestAuditTrail(t *testing.T) {
	_, err := os.Stat(hostPython)
	testenv.Need(t, err == nil, hostPython+" (contexts run it in local mode)")
	var gotSecret atomic.Value
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotSecret.Store(r.Header.Get("X-Token"))
		fmt.Fprint(w, "upstream")
	}))
	t.Cleanup(upstream.Close)
	_, ps, _ := net.SplitHostPort(upstream.Listener.Addr().String())
	port, _ := strconv.Atoi(ps)
	s := newStack(t, func(o *options) {
		o.audit = true
		o.live.Snapshots = snapshotStore(t)
		o.engine = func(c *engine.Config) {
			c.Network = netpolicy.Policy{Allow: []string{"allowed.test", "denied.test"}, Ports: []int{port}, AllowPrivate: true,
				Resolve: map[string]string{"allowed.test": "127.0.0.1", "denied.test": "127.0.0.1"},
				Secrets: []netpolicy.Secret{{Domain: "allowed.test", Header: "X-Token", Value: "s3cret-value"}}}
		}
	})
	s.call(keyAlpha, "POST", "/v1/sandboxes", jsonOf(t, sandbox.CreateSandboxRequest{SandboxID: "box",
		Network: &sandbox.Network{Allow: []string{"allowed.test"}}}), http.StatusCreated, nil)

	echo := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"echo", "hi there"}})
	s.wait(keyAlpha, "box", echo.PID)
	pty := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"cat"}, PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}})
	s.call(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/stdin", pty.PID), "typed\n", http.StatusOK, nil)
	s.call(keyAlpha, "POST", fmt.Sprintf("/v1/sandboxes/box/processes/%d/signal", pty.PID), "", http.StatusNoContent, nil)
	s.wait(keyAlpha, "box", pty.PID)

	s.call(keyAlpha, "PUT", "/v1/sandboxes/box/files?path=/workspace/a.txt", "abc", http.StatusOK, nil)
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/files/move", `{"from": "/workspace/a.txt", "to": "/workspace/b.txt"}`, http.StatusOK, nil)
	s.call(keyAlpha, "DELETE", "/v1/sandboxes/box/files?path=/workspace/b.txt", "", http.StatusNoContent, nil)

	var c sandbox.CodeContext
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/contexts", `{}`, http.StatusCreated, &c)
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/contexts/"+c.ID+"/run", `{"code": "6 * 7"}`, http.StatusOK, nil, "Accept", "application/json")
	var fork sandbox.CodeContext
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/contexts/"+c.ID+"/fork", "", http.StatusCreated, &fork)

	for _, host := range []string{"allowed.test", "denied.test"} {
		p := s.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"curl", "-s", fmt.Sprintf("http://%s:%d/", host, port)}})
		s.wait(keyAlpha, "box", p.PID)
	}
	if gotSecret.Load() != "s3cret-value" {
		t.Fatalf("the upstream got X-Token %v: the allowed request did not go through the proxy", gotSecret.Load())
	}

	s.call(keyAlpha, "POST", "/v1/sandboxes/box/pause", "", http.StatusOK, nil)
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/resume", "", http.StatusOK, nil)

	// Snapshots and forks, with their lineage.
	var snap sandbox.Snapshot
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/snapshots", `{"name": "audited"}`, http.StatusCreated, &snap)
	s.call(keyAlpha, "POST", "/v1/sandboxes", jsonOf(t, sandbox.CreateSandboxRequest{SandboxID: "child", SnapshotID: snap.SnapshotID}),
		http.StatusCreated, nil)
	s.call(keyAlpha, "DELETE", "/v1/snapshots/"+snap.SnapshotID, "", http.StatusNoContent, nil)
	s.call(keyAlpha, "DELETE", "/v1/sandboxes/box", "", http.StatusNoContent, nil)
	s.call(keyAlpha, "POST", "/v1/executions?wait=true", `{"language": "bash", "code": "echo run"}`, http.StatusOK, nil)

	alphaKey := audit.KeyID(keyAlpha)
	want := []struct {
		action string
		fields map[string]string
	}{
		{audit.SandboxCreate, map[string]string{"network_allow": `["allowed.test"]`}},
		{audit.ProcessStart, map[string]string{"argv": `["echo","hi there"]`}},
		{audit.ProcessStart, map[string]string{"argv": `["cat"]`, "pty": "80x24"}},
		{audit.ProcessEnd, map[string]string{"pty": "true", "stdin_bytes": "6"}},
		{audit.FileWrite, map[string]string{"path": "/workspace/a.txt", "size": "3", "sha256": audit.SHA256([]byte("abc"))}},
		{audit.FileRename, map[string]string{"from": "/workspace/a.txt", "to": "/workspace/b.txt"}},
		{audit.FileRemove, map[string]string{"path": "/workspace/b.txt"}},
		{audit.ContextRun, map[string]string{"context": c.ID, "code_sha256": audit.SHA256([]byte("6 * 7"))}},
		{audit.ContextFork, map[string]string{"context": fork.ID, "parent": c.ID}},
		{audit.EgressAllowed, map[string]string{"host": "allowed.test", "port": ps}},
		{audit.SecretInjected, map[string]string{"name": "X-Token", "host": "allowed.test"}},
		{audit.EgressDenied, map[string]string{"host": "denied.test", "port": ps}},
		{audit.SandboxPause, nil},
		{audit.SandboxResume, nil},
		{audit.SandboxSnapshot, map[string]string{"name": "audited", "snapshot_id": snap.SnapshotID}},
		{audit.SandboxKill, nil},
	}
	var events []sandbox.AuditEvent
	until(t, "every action in the audit trail", func() bool {
		events = s.auditEvents(keyAlpha, "?sandbox_id=box&limit=7")
		return len(events) >= len(want)
	})
	for _, w := range want {
		found := false
		for _, e := range events {
			if e.Action != w.action || !hasFields(e.Fields, w.fields) {
				continue
			}
			found = true
			if e.Tenant != "alpha" || e.KeyID != alphaKey || e.SandboxID != "box" || e.Node != "node-a" {
				t.Errorf("%s: tenant %q key %q sandbox %q node %q; want alpha, %s, box, node-a", w.action, e.Tenant, e.KeyID, e.SandboxID, e.Node, alphaKey)
			}
			if w.action == audit.EgressDenied && (e.Outcome != audit.Denied || e.Error == "") {
				t.Errorf("denied egress: outcome %q error %q", e.Outcome, e.Error)
			}
		}
		if !found {
			t.Errorf("no %s event with %v among %d: %+v", w.action, w.fields, len(events), events)
		}
	}
	// The sandboxes made from the snapshot name it; its deletion is the
	// tenant's.
	if got := s.auditEvents(keyAlpha, "?sandbox_id=child&action="+audit.SandboxCreate); len(got) != 1 ||
		got[0].Fields["snapshot_id"] != snap.SnapshotID || got[0].KeyID != alphaKey {
		t.Errorf("child's create: %+v, want one naming snapshot %s", got, snap.SnapshotID)
	}
	if got := s.auditEvents(keyAlpha, "?action="+audit.SnapshotDelete); len(got) != 1 || got[0].Fields["snapshot"] != snap.SnapshotID {
		t.Errorf("snapshot.delete: %+v", got)
	}
	if r := s.call(keyAlpha, "GET", "/v1/audit?limit=1000", "", http.StatusOK, nil); strings.Contains(string(r.body), "s3cret-value") {
		t.Error("the audit trail holds a secret's value")
	}
	var submit []sandbox.AuditEvent
	until(t, "the execution's submit", func() bool {
		submit = s.auditEvents(keyAlpha, "?action="+audit.ExecutionSubmit)
		return len(submit) == 1
	})
	if e := submit[0]; e.KeyID != alphaKey || e.ExecutionID == "" || e.Fields["code_sha256"] != audit.SHA256([]byte("echo run")) {
		t.Errorf("submit event %+v", e)
	}
	if got := s.auditEvents(keyAlpha, "?key_id="+audit.KeyID(keyBeta)); len(got) != 0 {
		t.Errorf("filtering on beta's key id finds %d of alpha's events", len(got))
	}
	for _, q := range []string{"", "?sandbox_id=box"} {
		if got := s.auditEvents(keyBeta, q); len(got) != 0 {
			t.Errorf("beta sees %d events with %q: %+v", len(got), q, got)
		}
	}
	if n, err := store.VerifyAudit(t.Context(), s.w.store, "alpha", 0, 0); err != nil || n < int64(len(want)) {
		t.Errorf("VerifyAudit = %d, %v", n, err)
	}
	for _, q := range []string{"?limit=0", "?limit=x", "?since=yesterday", "?sandbox_id=../x", "?action=a%20b", "?cursor=nope"} {
		s.fail(keyAlpha, "GET", "/v1/audit"+q, "", http.StatusBadRequest, "invalid_request")
	}
}

// TestAuditFork: a fork is recorded on its source, naming the sandboxes it
// made, and each of them has a create naming the snapshot it came from.
func TestAuditFork(t *testing.T) {
	s := newStack(t, func(o *options) { o.audit = true; o.idle = true; o.live.Snapshots = snapshotStore(t) })
	s.createBox(keyAlpha, "box", nil)
	var forks sandbox.ForkAnswer
	s.call(keyAlpha, "POST", "/v1/sandboxes/box/fork", `{"count": 2}`, http.StatusCreated, &forks)
	var ids []string
	for _, f := range forks.Forks {
		if f.Error != nil || f.Sandbox == nil {
			t.Fatalf("fork: %+v", forks)
		}
		ids = append(ids, f.Sandbox.SandboxID)
	}
	var fork []sandbox.AuditEvent
	until(t, "the fork's event", func() bool {
		fork = s.auditEvents(keyAlpha, "?sandbox_id=box&action="+audit.SandboxFork)
		return len(fork) == 1
	})
	if e := fork[0]; e.KeyID != audit.KeyID(keyAlpha) || e.Outcome != audit.OK || e.Fields["count"] != "2" ||
		e.Fields["forks"] != `["`+ids[0]+`","`+ids[1]+`"]` {
		t.Errorf("fork event %+v, want forks %v", e, ids)
	}
	for _, id := range ids {
		until(t, id+"'s create", func() bool {
			got := s.auditEvents(keyAlpha, "?sandbox_id="+id+"&action="+audit.SandboxCreate)
			return len(got) == 1 && got[0].Fields["snapshot_id"] != ""
		})
	}
	if got := s.auditEvents(keyBeta, "?action="+audit.SandboxFork); len(got) != 0 {
		t.Errorf("beta sees alpha's fork: %+v", got)
	}
}

func hasFields(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// auditEvents reads every page of GET /v1/audit with query q.
func (s *stack) auditEvents(key, q string) []sandbox.AuditEvent {
	s.t.Helper()
	var out []sandbox.AuditEvent
	sep := "?"
	if q != "" {
		sep = "&"
	}
	cursor := ""
	for {
		var p sandbox.AuditPage
		path := "/v1/audit" + q
		if cursor != "" {
			path += sep + "cursor=" + cursor
		}
		s.call(key, "GET", path, "", http.StatusOK, &p)
		out = append(out, p.Events...)
		if p.NextCursor == "" {
			return out
		}
		cursor = p.NextCursor
	}
}

// TestAuditAcrossNodes: two nodes write one tenant's trail in the store
// they share; a call made on node b for a sandbox node a owns is recorded
// once, by node a; both nodes' events form one unbroken chain.
func TestAuditAcrossNodes(t *testing.T) {
	w := newWorld(t)
	a := w.stack(func(o *options) { o.id = "node-a"; o.audit = true })
	b := w.stack(func(o *options) { o.id = "node-b"; o.audit = true })
	a.createBox(keyAlpha, "box", nil)
	p := b.start(keyAlpha, "box", sandbox.StartProcessRequest{Cmd: []string{"echo", "via b"}})
	b.wait(keyAlpha, "box", p.PID)
	b.call(keyAlpha, "PUT", "/v1/sandboxes/box/files?path=/workspace/b.txt", "from b", http.StatusOK, nil)
	a.call(keyAlpha, "PUT", "/v1/sandboxes/box/files?path=/workspace/a.txt", "from a", http.StatusOK, nil)
	b.fail(keyAlpha, "POST", "/v1/sandboxes", `{"sandbox_id": "box"}`, http.StatusConflict, "conflict")
	// Both nodes submit at once: two writers for one tenant.
	done := make(chan struct{})
	for _, s := range []*stack{a, b} {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 5 {
				s.call(keyAlpha, "POST", "/v1/executions", `{"language": "bash", "code": "true"}`, http.StatusAccepted, nil)
			}
		}()
	}
	<-done
	<-done
	var events []sandbox.AuditEvent
	until(t, "both nodes' events", func() bool {
		events = a.auditEvents(keyAlpha, "?limit=1000")
		n := 0
		for _, e := range events {
			if e.Action == audit.ExecutionSubmit {
				n++
			}
		}
		return n == 10
	})
	count := map[string]int{}
	nodes := map[string]bool{}
	for i, e := range events {
		if e.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
		nodes[e.Node] = true
		if e.SandboxID == "box" && e.Outcome == audit.OK {
			count[e.Action]++
			if e.Node != "node-a" || e.KeyID != audit.KeyID(keyAlpha) {
				t.Errorf("%s on box recorded by %s with key %s; want node-a, alpha's key", e.Action, e.Node, e.KeyID)
			}
		}
	}
	if count[audit.ProcessStart] != 1 || count[audit.FileWrite] != 2 || count[audit.SandboxCreate] != 1 {
		t.Errorf("box's events: %v; want one process start, two writes, one create", count)
	}
	if !nodes["node-a"] || !nodes["node-b"] {
		t.Errorf("the chain holds events of %v; want both nodes'", nodes)
	}
	if n, err := store.VerifyAudit(t.Context(), w.store, "alpha", 0, 0); err != nil || n != int64(len(events)) {
		t.Errorf("VerifyAudit = %d, %v; want %d", n, err, len(events))
	}
}
