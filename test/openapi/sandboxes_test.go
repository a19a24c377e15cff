package openapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

// liveSandboxes exercises every operation of /v1/sandboxes and each
// answer it documents.
func (c *checker) liveSandboxes(key string) {
	t := c.t
	js := func(v any) []byte { return mustJSON(v) }
	octet := http.Header{"Content-Type": {"application/octet-stream"}}

	// Create: 201, 400, 401, 409.
	var info sandbox.Info
	raw := c.do(call{method: "POST", path: "/v1/sandboxes", key: key, want: 201,
		body: js(sandbox.CreateSandboxRequest{SandboxID: "spec-live", Tier: sandbox.IsolationContainer, TimeoutSeconds: 600,
			Limits: sandbox.SandboxLimits{DiskMB: 32}, Metadata: map[string]string{"suite": "openapi"}})})
	if err := json.Unmarshal(raw, &info); err != nil || info.SandboxID != "spec-live" {
		t.Fatalf("create: %s", raw)
	}
	base := "/v1/sandboxes/spec-live"
	c.do(call{method: "POST", path: "/v1/sandboxes", key: key, want: 400, invalid: true, body: js(map[string]any{"tier": "vm"})})
	c.do(call{method: "POST", path: "/v1/sandboxes", want: 401, body: js(map[string]any{})})
	c.do(call{method: "POST", path: "/v1/sandboxes", key: key, want: 409, body: js(map[string]any{"sandbox_id": "spec-live"})})

	// List: 200, 400, 401.
	listed := c.do(call{method: "GET", path: "/v1/sandboxes?metadata.suite=openapi", key: key, want: 200})
	if !strings.Contains(string(listed), `"sandbox_id":"spec-live"`) {
		t.Errorf("list by metadata: %s", listed)
	}
	c.do(call{method: "GET", path: "/v1/sandboxes?metadata=suite%3Dopenapi", key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/sandboxes?metadata=broken", key: key, want: 400})
	c.do(call{method: "GET", path: "/v1/sandboxes", want: 401})

	// Get, timeout.
	c.do(call{method: "GET", path: base, key: key, want: 200})
	c.do(call{method: "GET", path: base, want: 401})
	c.do(call{method: "GET", path: "/v1/sandboxes/nope", key: key, want: 404})
	c.do(call{method: "GET", path: base, key: "wrong", want: 401})
	c.do(call{method: "POST", path: base + "/timeout", key: key, want: 200, body: js(map[string]int{"timeout_seconds": 900})})
	c.do(call{method: "POST", path: base + "/timeout", key: key, want: 400, invalid: true, body: js(map[string]int{"timeout_seconds": 0})})
	c.do(call{method: "POST", path: base + "/timeout", want: 401, body: js(map[string]int{"timeout_seconds": 60})})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/timeout", key: key, want: 404, body: js(map[string]int{"timeout_seconds": 60})})

	// Metrics: 200 (a reading at once), 400, 401, 404.
	if m := c.do(call{method: "GET", path: base + "/metrics", key: key, want: 200}); !strings.Contains(string(m), `"cpu_used_pct":`) {
		t.Errorf("metrics of a new sandbox: %s", m)
	}
	c.do(call{method: "GET", path: base + "/metrics?since=2020-01-01T00%3A00%3A00Z&until=4102444800", key: key, want: 200})
	c.do(call{method: "GET", path: base + "/metrics?since=yesterday", key: key, want: 400})
	c.do(call{method: "GET", path: base + "/metrics", want: 401})
	c.do(call{method: "GET", path: "/v1/sandboxes/nope/metrics", key: key, want: 404})
	// Ports: a server in the sandbox that answers every method; each
	// method's 200, 400, 401, 404 and 502 (nothing listens on 8001).
	c.do(call{method: "POST", path: base + "/processes", key: key, want: 201,
		body: js(sandbox.StartProcessRequest{Cmd: []string{"python3", "-c", anyMethodServer}})})
	for i := 0; ; i++ {
		got := c.do(call{method: "GET", path: base + "/ports/8000/up", key: key})
		if strings.HasPrefix(string(got), "GET /up") {
			break
		}
		if i == 200 {
			t.Fatalf("the server in the sandbox never answered: %s", clip(got))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		// One segment: the spec's router takes {path} as one (the
		// route takes any number).
		got := c.do(call{method: m, path: base + "/ports/8000/ab?q=1", key: key, want: 200, header: http.Header{"Content-Type": {"text/plain"}}})
		if !strings.HasPrefix(string(got), m+" /ab?q=1") {
			t.Errorf("%s through the port: %s", m, clip(got))
		}
		c.do(call{method: m, path: base + "/ports/0/x", key: key, want: 400, invalid: true})
		c.do(call{method: m, path: base + "/ports/8000/x", want: 401})
		c.do(call{method: m, path: "/v1/sandboxes/nope/ports/8000/x", key: key, want: 404})
		c.do(call{method: m, path: base + "/ports/8001/x", key: key, want: 502})
	}

	// Processes.
	var cat sandbox.ProcessInfo
	json.Unmarshal(c.do(call{method: "POST", path: base + "/processes", key: key, want: 201,
		body: js(sandbox.StartProcessRequest{Cmd: []string{"cat"}, Stdin: true, Tag: "cat"})}), &cat)
	var quiet sandbox.ProcessInfo
	json.Unmarshal(c.do(call{method: "POST", path: base + "/processes", key: key, want: 201,
		body: js(sandbox.StartProcessRequest{Shell: "echo hi"})}), &quiet)
	c.do(call{method: "POST", path: base + "/processes", key: key, want: 400, body: js(map[string]any{"cmd": []string{}})})
	c.do(call{method: "POST", path: base + "/processes", want: 401, body: js(map[string]any{"cmd": []string{"true"}})})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/processes", key: key, want: 404, body: js(map[string]any{"cmd": []string{"true"}})})
	var term sandbox.ProcessInfo
	json.Unmarshal(c.do(call{method: "POST", path: base + "/processes", key: key, want: 201,
		body: js(sandbox.StartProcessRequest{Cmd: []string{"bash"}, PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}})}), &term)
	tp := fmt.Sprintf("%s/processes/%d", base, term.PID)
	c.do(call{method: "POST", path: tp + "/resize", key: key, want: 204, body: js(sandbox.PTYSize{Cols: 120, Rows: 40})})
	c.do(call{method: "POST", path: tp + "/resize", key: key, want: 400, invalid: true, body: js(map[string]any{"cols": 0, "rows": 1})})
	c.do(call{method: "POST", path: tp + "/signal", key: key, want: 204, body: js(map[string]any{"signal": "SIGKILL"})})
	c.do(call{method: "GET", path: base + "/processes", key: key, want: 200})
	c.do(call{method: "GET", path: base + "/processes", want: 401})
	c.do(call{method: "GET", path: "/v1/sandboxes/nope/processes", key: key, want: 404})
	p := fmt.Sprintf("%s/processes/%d", base, cat.PID)
	q := fmt.Sprintf("%s/processes/%d", base, quiet.PID)
	c.do(call{method: "GET", path: p, key: key, want: 200})
	c.do(call{method: "GET", path: q + "?wait=true", key: key, want: 200})
	c.do(call{method: "GET", path: p, want: 401})
	c.do(call{method: "GET", path: base + "/processes/999999", key: key, want: 404})
	c.do(call{method: "POST", path: p + "/stdin", key: key, want: 200, header: octet, body: []byte("through cat\n")})
	c.do(call{method: "POST", path: p + "/stdin", want: 401, header: octet, body: []byte("x")})
	c.do(call{method: "POST", path: base + "/processes/999999/stdin", key: key, want: 404, header: octet, body: []byte("x")})
	c.do(call{method: "POST", path: q + "/stdin", key: key, want: 409, header: octet, body: []byte("x")})
	// A process that never reads its stdin: the write ends after the
	// stdin bound (10 s) with 429 and the bytes accepted.
	var deaf sandbox.ProcessInfo
	json.Unmarshal(c.do(call{method: "POST", path: base + "/processes", key: key, want: 201,
		body: js(sandbox.StartProcessRequest{Cmd: []string{"sleep", "600"}, Stdin: true})}), &deaf)
	dp := fmt.Sprintf("%s/processes/%d", base, deaf.PID)
	if b := c.do(call{method: "POST", path: dp + "/stdin", key: key, want: 429, header: octet, body: make([]byte, 4<<20)}); !strings.Contains(string(b), `"written":`) {
		t.Errorf("a write to a process that does not read: %s", clip(b))
	}
	c.do(call{method: "POST", path: dp + "/signal", key: key, want: 204, body: js(map[string]any{"signal": "SIGKILL"})})
	c.do(call{method: "POST", path: p + "/stdin/close", key: key, want: 204})
	c.do(call{method: "POST", path: p + "/stdin/close", want: 401})
	c.do(call{method: "POST", path: base + "/processes/999999/stdin/close", key: key, want: 404})
	c.do(call{method: "POST", path: q + "/stdin/close", key: key, want: 409})
	events := c.do(call{method: "GET", path: p + "/events", key: key, want: 200})
	if !strings.Contains(string(events), `"text":"through cat\n"`) || !strings.Contains(string(events), "event: end") {
		t.Errorf("cat's events: %s", clip(events))
	}
	c.do(call{method: "GET", path: p + "/events", key: key, want: 400, invalid: true, header: http.Header{"Last-Event-Id": {"x"}}})
	c.do(call{method: "GET", path: p + "/events", want: 401})
	c.do(call{method: "GET", path: base + "/processes/999999/events", key: key, want: 404})
	var sleeper sandbox.ProcessInfo
	json.Unmarshal(c.do(call{method: "POST", path: base + "/processes", key: key, want: 201,
		body: js(sandbox.StartProcessRequest{Cmd: []string{"sleep", "600"}})}), &sleeper)
	sp := fmt.Sprintf("%s/processes/%d", base, sleeper.PID)
	c.do(call{method: "POST", path: sp + "/resize", key: key, want: 409, body: js(sandbox.PTYSize{Cols: 100, Rows: 40})})
	c.do(call{method: "POST", path: sp + "/resize", want: 401, body: js(sandbox.PTYSize{Cols: 100, Rows: 40})})
	c.do(call{method: "POST", path: base + "/processes/999999/resize", key: key, want: 404, body: js(sandbox.PTYSize{Cols: 100, Rows: 40})})
	c.do(call{method: "POST", path: sp + "/signal", key: key, want: 400, invalid: true, body: js(map[string]any{"signal": "SIGNOPE"})})
	c.do(call{method: "POST", path: sp + "/signal", want: 401, body: js(map[string]any{"signal": "SIGTERM"})})
	c.do(call{method: "POST", path: base + "/processes/999999/signal", key: key, want: 404, body: js(map[string]any{"signal": 15})})
	c.do(call{method: "POST", path: sp + "/signal", key: key, want: 204, body: js(map[string]any{"signal": "SIGTERM"})})
	c.do(call{method: "GET", path: sp + "?wait=true", key: key, want: 200})
	c.do(call{method: "POST", path: sp + "/signal", key: key, want: 409, body: js(map[string]any{"signal": 15})})
	// 429: as many processes as a sandbox may run.
	for i := 0; i < 70 && !c.seen["POST /v1/sandboxes/{id}/processes 429"]; i++ {
		c.do(call{method: "POST", path: base + "/processes", key: key, body: js(sandbox.StartProcessRequest{Cmd: []string{"sleep", "600"}})})
	}
	if !c.seen["POST /v1/sandboxes/{id}/processes 429"] {
		t.Errorf("no 429 after 70 processes")
	}

	// Files.
	f := base + "/files?path="
	c.do(call{method: "PUT", path: f + "/workspace/d/a.bin", key: key, want: 200, header: octet, body: []byte{0, 1, 2, 0xff}})
	c.do(call{method: "PUT", path: f + "/proc/self/environ", key: key, want: 400, header: octet, body: []byte("x")})
	c.do(call{method: "PUT", path: f + "a", want: 401, header: octet, body: []byte("x")})
	c.do(call{method: "PUT", path: "/v1/sandboxes/nope/files?path=a", key: key, want: 404, header: octet, body: []byte("x")})
	c.do(call{method: "PUT", path: f + "big", key: key, want: 413, header: octet, body: make([]byte, 40<<20)})
	got := c.do(call{method: "GET", path: f + "d/a.bin", key: key, want: 200})
	if string(got) != "\x00\x01\x02\xff" {
		t.Errorf("download: %q", got)
	}
	c.do(call{method: "GET", path: f + "..%2Fx", key: key, want: 400})
	c.do(call{method: "GET", path: f + "d/a.bin", want: 401})
	c.do(call{method: "GET", path: f + "missing", key: key, want: 404})
	c.do(call{method: "GET", path: base + "/files/list?path=/workspace&depth=2", key: key, want: 200})
	c.do(call{method: "GET", path: base + "/files/list?depth=99", key: key, want: 400, invalid: true})
	c.do(call{method: "POST", path: base + "/files/mkdir", key: key, want: 201, body: js(map[string]any{"path": "m/n", "parents": true})})
	c.do(call{method: "POST", path: base + "/files/mkdir", key: key, want: 400, body: js(map[string]any{"path": "m/n"})})
	c.do(call{method: "POST", path: base + "/files/mkdir", want: 401, body: js(map[string]any{"path": "x"})})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/files/mkdir", key: key, want: 404, body: js(map[string]any{"path": "x"})})
	c.do(call{method: "POST", path: base + "/files/move", key: key, want: 200, body: js(map[string]any{"from": "m/n", "to": "/workspace/n2"})})
	c.do(call{method: "POST", path: base + "/files/move", key: key, want: 400, body: js(map[string]any{"from": "n2", "to": "/tmp/n3"})})
	c.do(call{method: "POST", path: base + "/files/move", want: 401, body: js(map[string]any{"from": "a", "to": "b"})})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/files/move", key: key, want: 404, body: js(map[string]any{"from": "a", "to": "b"})})
	// A watch that ends by itself: its directory goes.
	c.do(call{method: "POST", path: base + "/files/mkdir", key: key, want: 201, body: js(map[string]any{"path": "watched"})})
	remove := func() {
		// The watch is on once its answer's headers came: its directory goes.
		req, _ := http.NewRequest("DELETE", c.url+f+"watched", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("remove the watched directory: %v", err)
			return
		}
		resp.Body.Close()
	}
	watched := c.do(call{method: "GET", path: base + "/files/watch?path=watched&recursive=true", key: key, want: 200, headers: remove})
	if !strings.Contains(string(watched), "event: end") {
		t.Errorf("the watch's stream: %s", clip(watched))
	}
	c.do(call{method: "GET", path: base + "/files/watch?path=/proc", key: key, want: 400})
	c.do(call{method: "GET", path: base + "/files/watch", want: 401})
	c.do(call{method: "GET", path: "/v1/sandboxes/nope/files/watch", key: key, want: 404})
	c.do(call{method: "GET", path: base + "/files/list", want: 401})
	c.do(call{method: "GET", path: base + "/files/list?path=/workspace/missing", key: key, want: 404})
	c.do(call{method: "GET", path: base + "/files/stat?path=d", key: key, want: 200})
	c.do(call{method: "GET", path: base + "/files/stat?path=/proc", key: key, want: 400})
	c.do(call{method: "GET", path: base + "/files/stat?path=d", want: 401})
	c.do(call{method: "GET", path: base + "/files/stat?path=missing", key: key, want: 404})
	c.do(call{method: "DELETE", path: f + "d", key: key, want: 204})
	c.do(call{method: "DELETE", path: f + "/workspace", key: key, want: 400})
	c.do(call{method: "DELETE", path: f + "d", want: 401})
	c.do(call{method: "DELETE", path: "/v1/sandboxes/nope/files?path=d", key: key, want: 404})

	// Code contexts (the sandbox runs the host image, whose python3 and
	// bash serve).
	var pyCtx, shCtx sandbox.CodeContext
	json.Unmarshal(c.do(call{method: "POST", path: base + "/contexts", key: key, want: 201,
		body: js(sandbox.ContextRequest{Language: "python", Env: map[string]string{"GREETING": "hi"}})}), &pyCtx)
	json.Unmarshal(c.do(call{method: "POST", path: base + "/contexts", key: key, want: 201,
		body: js(sandbox.ContextRequest{Language: "bash"})}), &shCtx)
	if pyCtx.ID == "" || shCtx.ID == "" {
		t.Fatalf("contexts %+v %+v", pyCtx, shCtx)
	}
	cx := base + "/contexts/" + pyCtx.ID
	c.do(call{method: "POST", path: base + "/contexts", key: key, want: 400, body: js(sandbox.ContextRequest{Language: "cobol"})})
	c.do(call{method: "POST", path: base + "/contexts", want: 401, body: js(map[string]any{})})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/contexts", key: key, want: 404, body: js(map[string]any{})})
	listedCtx := c.do(call{method: "GET", path: base + "/contexts", key: key, want: 200})
	if !strings.Contains(string(listedCtx), pyCtx.ID) {
		t.Errorf("contexts: %s", listedCtx)
	}
	c.do(call{method: "GET", path: base + "/contexts", want: 401})
	c.do(call{method: "GET", path: "/v1/sandboxes/nope/contexts", key: key, want: 404})
	streamed := c.do(call{method: "POST", path: cx + "/run", key: key, want: 200, header: http.Header{"Accept": {"text/event-stream"}},
		body: js(sandbox.RunCodeRequest{Code: "import os\nprint(os.environ['GREETING'])\n6 * 7", TimeoutSeconds: 60})})
	if !strings.Contains(string(streamed), "event: result") || !strings.Contains(string(streamed), `"text/plain":"42"`) {
		t.Errorf("run, streamed: %s", clip(streamed))
	}
	var evs sandbox.ContextEventList
	json.Unmarshal(c.do(call{method: "POST", path: cx + "/run", key: key, want: 200, header: http.Header{"Accept": {"application/json"}},
		body: js(sandbox.RunCodeRequest{Code: "1 / 0"})}), &evs)
	if n := len(evs.Events); n < 3 || evs.Events[n-2].Name != "ZeroDivisionError" {
		t.Errorf("run as JSON: %+v", evs)
	}
	c.do(call{method: "POST", path: cx + "/run", key: key, want: 400, body: js(map[string]any{"code": "1", "timeout_seconds": -1}), invalid: true})
	c.do(call{method: "POST", path: cx + "/run", want: 401, body: js(map[string]any{"code": "1"})})
	c.do(call{method: "POST", path: base + "/contexts/nope/run", key: key, want: 404, body: js(map[string]any{"code": "1"})})
	var forked sandbox.CodeContext
	json.Unmarshal(c.do(call{method: "POST", path: cx + "/fork", key: key, want: 201}), &forked)
	c.do(call{method: "POST", path: base + "/contexts/" + shCtx.ID + "/fork", key: key, want: 400})
	c.do(call{method: "POST", path: cx + "/fork", want: 401})
	c.do(call{method: "POST", path: base + "/contexts/nope/fork", key: key, want: 404})
	for _, op := range []string{"/restart", "/interrupt"} {
		c.do(call{method: "POST", path: cx + op, key: key, want: 204})
		c.do(call{method: "POST", path: cx + op, want: 401})
		c.do(call{method: "POST", path: base + "/contexts/nope" + op, key: key, want: 404})
	}
	c.do(call{method: "DELETE", path: base + "/contexts/" + forked.ID, key: key, want: 204})
	c.do(call{method: "DELETE", path: base + "/contexts/" + forked.ID, key: key, want: 404})
	c.do(call{method: "DELETE", path: cx, want: 401})

	// Pause and resume: 200, 401, 404, 409 (paused already; not paused).
	paused := c.do(call{method: "POST", path: base + "/pause", key: key, want: 200})
	if !strings.Contains(string(paused), `"state":"paused"`) {
		t.Errorf("pause: %s", paused)
	}
	c.do(call{method: "POST", path: base + "/pause", key: key, want: 409})
	c.do(call{method: "POST", path: base + "/pause", want: 401})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/pause", key: key, want: 404})
	c.do(call{method: "POST", path: base + "/processes", key: key, want: 409, body: js(map[string]any{"cmd": []string{"true"}})})
	resumed := c.do(call{method: "POST", path: base + "/resume", key: key, want: 200})
	if !strings.Contains(string(resumed), `"state":"running"`) || !strings.Contains(string(resumed), `"resume":{`) {
		t.Errorf("resume: %s", resumed)
	}
	c.do(call{method: "POST", path: base + "/resume", key: key, want: 409})
	c.do(call{method: "POST", path: base + "/resume", want: 401})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/resume", key: key, want: 404})

	// Snapshots: take one (201, 400, 401, 404), list (200, 400, 401),
	// get and delete (200/204, 400, 401, 404), make a sandbox from it,
	// fork (201, 400, 401, 404).
	var snap sandbox.Snapshot
	raw = c.do(call{method: "POST", path: base + "/snapshots", key: key, want: 201, body: js(sandbox.CreateSnapshotRequest{Name: "spec-snap"})})
	if err := json.Unmarshal(raw, &snap); err != nil || snap.SnapshotID == "" || snap.SandboxID != "spec-live" {
		t.Errorf("snapshot: %s", raw)
	}
	c.do(call{method: "POST", path: base + "/snapshots", key: key, want: 400, body: js(sandbox.CreateSnapshotRequest{Name: "../x"})})
	c.do(call{method: "POST", path: base + "/snapshots", want: 401, body: js(map[string]any{})})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/snapshots", key: key, want: 404, body: js(map[string]any{})})
	if l := c.do(call{method: "GET", path: "/v1/snapshots?sandbox_id=spec-live&limit=5", key: key, want: 200}); !strings.Contains(string(l), snap.SnapshotID) {
		t.Errorf("snapshots: %s", l)
	}
	c.do(call{method: "GET", path: "/v1/snapshots?cursor=nonsense", key: key, want: 400})
	c.do(call{method: "GET", path: "/v1/snapshots", want: 401})
	c.do(call{method: "GET", path: "/v1/snapshots/spec-snap", key: key, want: 200})
	c.do(call{method: "GET", path: "/v1/snapshots/" + snap.SnapshotID, key: testserver.BetaKey, want: 404})
	c.do(call{method: "GET", path: "/v1/snapshots/a%2F..", key: key, want: 400})
	c.do(call{method: "GET", path: "/v1/snapshots/" + snap.SnapshotID, want: 401})
	made := c.do(call{method: "POST", path: "/v1/sandboxes", key: key, want: 201,
		body: js(sandbox.CreateSandboxRequest{SandboxID: "spec-copy", SnapshotID: "spec-snap", TimeoutSeconds: 60})})
	if !strings.Contains(string(made), `"sandbox_id":"spec-copy"`) {
		t.Errorf("create from a snapshot: %s", made)
	}
	c.do(call{method: "DELETE", path: "/v1/sandboxes/spec-copy", key: key, want: 204})
	forks := c.do(call{method: "POST", path: base + "/fork", key: key, want: 201, body: js(sandbox.ForkRequest{Count: 1, TimeoutSeconds: 60})})
	var fa sandbox.ForkAnswer
	if err := json.Unmarshal(forks, &fa); err != nil || len(fa.Forks) != 1 || fa.Forks[0].Sandbox == nil {
		t.Errorf("fork: %s", forks)
	} else {
		c.do(call{method: "DELETE", path: "/v1/sandboxes/" + fa.Forks[0].Sandbox.SandboxID, key: key, want: 204})
	}
	c.do(call{method: "POST", path: base + "/fork", key: key, want: 400, invalid: true, body: js(sandbox.ForkRequest{Count: 17})})
	c.do(call{method: "POST", path: base + "/fork", want: 401, body: js(map[string]any{})})
	c.do(call{method: "POST", path: "/v1/sandboxes/nope/fork", key: key, want: 404, body: js(map[string]any{})})
	c.do(call{method: "DELETE", path: "/v1/snapshots/" + snap.SnapshotID, want: 401})
	c.do(call{method: "DELETE", path: "/v1/snapshots/" + snap.SnapshotID, key: key, want: 204})
	c.do(call{method: "DELETE", path: "/v1/snapshots/" + snap.SnapshotID, key: key, want: 404})
	c.do(call{method: "DELETE", path: "/v1/snapshots/a%2F..", key: key, want: 400})
	c.do(call{method: "GET", path: "/v1/snapshots/" + snap.SnapshotID, key: key, want: 404})

	// Delete: 204, 401, 404.
	c.do(call{method: "DELETE", path: base, want: 401})
	c.do(call{method: "DELETE", path: base, key: key, want: 204})
	c.do(call{method: "DELETE", path: base, key: key, want: 404})
}

// anyMethodServer is a python HTTP server on 127.0.0.1:8000 that answers
// every method with the method, the path and the body.
const anyMethodServer = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def any(self):
        n = int(self.headers.get("Content-Length") or 0)
        out = (self.command + " " + self.path + "\n").encode() + self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = any
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
`
