package badinput

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/getkin/kin-openapi/openapi3"
)

// v1Fixture is a valid call of an operation of api/openapi.yaml, which
// its cases make hostile one part at a time. Values may name what the
// sweep made first ($sb, $pid, ...: v1World).
type v1Fixture struct {
	params map[string]string // path parameters
	query  string            // a valid query, escaped
	body   string            // a valid body (JSON or raw, as the operation takes)
	// alt are other valid bodies, for fields body cannot hold with its
	// own (shell beside cmd): each of their fields is made hostile too.
	alt   []string
	extra []kase // cases of this operation only
}

var (
	sbP   = map[string]string{"id": "$sb"}
	procP = map[string]string{"id": "$sb", "pid": "$cat"}
	ctxP  = map[string]string{"id": "$sb", "cid": "$cid"}
	portP = map[string]string{"id": "$sb", "port": "8000", "path": "index.html"}
	execP = map[string]string{"id": "sweep-exec"}
	sesP  = map[string]string{"id": "sweep-session"}
	fileP = map[string]string{"id": "sweep-session", "path": "f.txt"}
	snapP = map[string]string{"id": "sweep-snap"}
)

// v1Fixtures has an entry for every operation of api/openapi.yaml: a new
// operation without one fails TestV1Routes.
var v1Fixtures = map[string]v1Fixture{
	"POST /v1/executions":                   {body: `{"language":"bash","code":"echo hi","limits":{"timeout_ms":5000,"memory_mb":64,"cpu_cores":0.5,"disk_mb":64},"env":{"A":"1"}}`},
	"GET /v1/executions":                    {query: "limit=5"},
	"GET /v1/executions/{id}":               {params: execP},
	"POST /v1/executions/{id}/cancel":       {params: execP},
	"GET /v1/executions/{id}/events":        {params: execP},
	"GET /v1/executions/{id}/egress":        {params: execP},
	"GET /v1/stats":                         {query: "window=3600"},
	"GET /v1/audit":                         {query: "action=file.write&limit=5"},
	"PUT /v1/sessions/{id}":                 {params: sesP, body: `{"ttl_seconds":3600,"disk_mb":1024}`},
	"POST /v1/sessions/{id}":                {params: sesP, body: `{"ttl_seconds":3600}`},
	"GET /v1/sessions/{id}":                 {params: sesP},
	"DELETE /v1/sessions/{id}":              {params: sesP},
	"GET /v1/sessions/{id}/files/":          {params: sesP},
	"GET /v1/sessions/{id}/files/{path}":    {params: fileP},
	"PUT /v1/sessions/{id}/files/{path}":    {params: fileP, body: "hello"},
	"DELETE /v1/sessions/{id}/files/{path}": {params: fileP},
	"POST /v1/sandboxes":                    {body: `{"tier":"container","timeout_seconds":600,"metadata":{"K":"v"},"limits":{"disk_mb":32}}`},
	"GET /v1/sandboxes":                     {query: "metadata.suite=sweep"},
	"GET /v1/sandboxes/{id}":                {params: sbP},
	"DELETE /v1/sandboxes/{id}":             {params: sbP},
	"POST /v1/sandboxes/{id}/timeout":       {params: sbP, body: `{"timeout_seconds":3600}`},
	"POST /v1/sandboxes/{id}/pause":         {params: sbP},
	"POST /v1/sandboxes/{id}/resume":        {params: sbP},
	"GET /v1/sandboxes/{id}/metrics":        {params: sbP, query: "since=2020-01-01T00%3A00%3A00Z&until=4102444800"},
	"POST /v1/sandboxes/{id}/snapshots":     {params: sbP, body: `{"name":"sweep-snap"}`},
	"POST /v1/sandboxes/{id}/fork":          {params: sbP, body: `{"count":1,"timeout_seconds":60}`},
	"GET /v1/snapshots":                     {query: "sandbox_id=sweep&limit=5"},
	"GET /v1/snapshots/{id}":                {params: snapP},
	"DELETE /v1/snapshots/{id}":             {params: snapP},
	"POST /v1/sandboxes/{id}/processes": {params: sbP, body: `{"cmd":["echo","hi"],"env":{"A":"1"},"cwd":"/workspace","tag":"t"}`,
		alt: []string{`{"shell":"echo hi"}`}},
	"GET /v1/sandboxes/{id}/processes":                    {params: sbP},
	"GET /v1/sandboxes/{id}/processes/{pid}":              {params: procP},
	"GET /v1/sandboxes/{id}/processes/{pid}/events":       {params: procP},
	"POST /v1/sandboxes/{id}/processes/{pid}/stdin":       {params: procP, body: "hi\n", extra: []kase{stdinBound()}},
	"POST /v1/sandboxes/{id}/processes/{pid}/stdin/close": {params: map[string]string{"id": "$sb", "pid": "$closer"}},
	"POST /v1/sandboxes/{id}/processes/{pid}/signal":      {params: map[string]string{"id": "$sb", "pid": "$victim"}, body: `{"signal":"SIGCONT"}`},
	"POST /v1/sandboxes/{id}/processes/{pid}/resize":      {params: map[string]string{"id": "$sb", "pid": "$term"}, body: `{"cols":100,"rows":30}`},
	"GET /v1/sandboxes/{id}/files":                        {params: sbP, query: "path=/workspace/f.txt"},
	"PUT /v1/sandboxes/{id}/files":                        {params: sbP, query: "path=/workspace/up.txt", body: "hello"},
	"DELETE /v1/sandboxes/{id}/files":                     {params: sbP, query: "path=/workspace/gone.txt"},
	"GET /v1/sandboxes/{id}/files/list":                   {params: sbP, query: "path=/workspace&depth=2"},
	"GET /v1/sandboxes/{id}/files/stat":                   {params: sbP, query: "path=/workspace/f.txt"},
	"POST /v1/sandboxes/{id}/files/mkdir":                 {params: sbP, body: `{"path":"/workspace/d","parents":true}`},
	"POST /v1/sandboxes/{id}/files/move":                  {params: sbP, body: `{"from":"/workspace/f.txt","to":"/workspace/f.txt"}`},
	"GET /v1/sandboxes/{id}/files/watch":                  {params: sbP, query: "path=/workspace&recursive=true"},
	"POST /v1/sandboxes/{id}/contexts":                    {params: sbP, body: `{"language":"python","cwd":"/workspace","env":{"A":"1"}}`},
	"GET /v1/sandboxes/{id}/contexts":                     {params: sbP},
	"DELETE /v1/sandboxes/{id}/contexts/{cid}":            {params: ctxP},
	"POST /v1/sandboxes/{id}/contexts/{cid}/run":          {params: ctxP, body: `{"code":"1+1","timeout_seconds":5}`},
	"POST /v1/sandboxes/{id}/contexts/{cid}/restart":      {params: ctxP},
	"POST /v1/sandboxes/{id}/contexts/{cid}/fork":         {params: ctxP},
	"POST /v1/sandboxes/{id}/contexts/{cid}/interrupt":    {params: ctxP},
	"GET /v1/sandboxes/{id}/ports/{port}/{path}":          {params: portP},
	"POST /v1/sandboxes/{id}/ports/{port}/{path}":         {params: portP},
	"PUT /v1/sandboxes/{id}/ports/{port}/{path}":          {params: portP},
	"PATCH /v1/sandboxes/{id}/ports/{port}/{path}":        {params: portP},
	"DELETE /v1/sandboxes/{id}/ports/{port}/{path}":       {params: portP},
	"OPTIONS /v1/sandboxes/{id}/ports/{port}/{path}":      {params: portP},
	"GET /v1/blobs/{key}":                                 {params: map[string]string{"key": "sweep/blob.txt"}, query: "$blobquery"},
	"HEAD /v1/blobs/{key}":                                {params: map[string]string{"key": "sweep/blob.txt"}, query: "$blobquery"},
	"GET /healthz":                                        {},
	"GET /readyz":                                         {},
	"GET /metrics":                                        {},
}

// stdinBound is the 4 MiB written to the stdin of a process that
// never reads: answered within its bound, not a call blocked for good.
func stdinBound() kase {
	return kase{name: "4 MiB to the stdin of a process that never reads", want: bounded, wire: v1Wire,
		req: request{method: "POST", path: "/v1/sandboxes/$sb/processes/$sleeper/stdin",
			header: http.Header{"Content-Type": {"application/octet-stream"}}, body: make([]byte, 4<<20)}}
}

// hostileSegments are what a path parameter is made: a traversal and a
// dot-dot segment escaped so the router does not clean them away, a NUL,
// and a 5,000-byte value.
var hostileSegments = map[string]string{
	"escaped traversal": "..%2F..%2Fetc%2Fpasswd",
	"escaped dot-dot":   "%2E%2E",
	"NUL":               "%00",
	"5,000 bytes":       long,
}

// v1World is what the fixtures name, made through the API itself.
type v1World struct {
	t    *testing.T
	s    *server
	vars map[string]string
}

// call makes a call of the set-up, which must answer one of statuses.
func (w *v1World) call(method, path, body string, statuses ...int) []byte {
	w.t.Helper()
	a := send(w.s.url, request{method: method, path: path, whole: true, body: []byte(body),
		header: http.Header{"Authorization": {"Bearer " + keyAlpha}, "Content-Type": {"application/json"}}})
	if !slices.Contains(statuses, a.status) {
		w.t.Fatalf("set-up %s %s: %s, want %v", method, path, a, statuses)
	}
	return a.body
}

// make makes (again) what the fixtures name: a live sandbox with its
// processes, a code context and files; a session with a file; an
// execution; a blob with its signed link.
func (w *v1World) make() {
	w.t.Helper()
	if w.vars == nil {
		w.vars = map[string]string{}
	}
	w.call("POST", "/v1/sandboxes", `{"sandbox_id":"sweep","tier":"container","timeout_seconds":3600}`, 201, 409)
	w.vars["$sb"] = "sweep"
	pid := func(body string) string {
		var p struct {
			PID int `json:"pid"`
		}
		json.Unmarshal(w.call("POST", "/v1/sandboxes/sweep/processes", body, 201), &p)
		return fmt.Sprint(p.PID)
	}
	w.vars["$cat"] = pid(`{"cmd":["cat"],"stdin":true}`)
	w.vars["$closer"] = pid(`{"cmd":["cat"],"stdin":true}`)
	w.vars["$sleeper"] = pid(`{"cmd":["sleep","3600"],"stdin":true}`)
	w.vars["$victim"] = pid(`{"cmd":["sleep","3600"]}`)
	w.vars["$term"] = pid(`{"cmd":["sleep","3600"],"pty":{"cols":80,"rows":24}}`)
	var c struct {
		ID string `json:"id"`
	}
	json.Unmarshal(w.call("POST", "/v1/sandboxes/sweep/contexts", `{"language":"python"}`, 201), &c)
	w.vars["$cid"] = c.ID
	w.call("PUT", "/v1/sandboxes/sweep/files?path=/workspace/f.txt", "hello", 200)
	w.call("POST", "/v1/sandboxes/sweep/snapshots", `{"name":"sweep-snap"}`, 201)
	w.call("PUT", "/v1/sessions/sweep-session", `{}`, 201, 200)
	w.call("PUT", "/v1/sessions/sweep-session/files/f.txt", "hello", 204, 200)
	w.call("POST", "/v1/executions?wait=true", `{"execution_id":"sweep-exec","language":"bash","code":"echo hi"}`, 200)
	if _, err := w.s.blobs.Put(w.t.Context(), "sweep/blob.txt", strings.NewReader("blob"), 4, "text/plain"); err != nil {
		w.t.Fatal(err)
	}
	link, _, err := w.s.blobs.SignedURL(w.t.Context(), "sweep/blob.txt", time.Hour)
	if err != nil {
		w.t.Fatal(err)
	}
	u, _ := url.Parse(link)
	w.vars["$blobquery"] = u.RawQuery
}

// alive reports whether the server serves and the fixtures' sandbox,
// session and context are there.
func (w *v1World) alive() bool {
	if !w.s.healthy() {
		return false
	}
	for _, p := range []string{"/v1/sandboxes/sweep", "/v1/sessions/sweep-session", "/v1/sandboxes/sweep/processes/" + w.vars["$cat"]} {
		a := send(w.s.url, request{method: "GET", path: p, header: http.Header{"Authorization": {"Bearer " + keyAlpha}}})
		if a.status != http.StatusOK {
			return false
		}
	}
	return true
}

func (w *v1World) expand(s string) string {
	for k, v := range w.vars {
		s = strings.ReplaceAll(s, k, v)
	}
	return s
}

// TestV1Routes sends every operation of api/openapi.yaml the malformed
// inputs of issue 26, each alone in an otherwise valid call: a forged key;
// each path parameter escaped out of its place, with a NUL, 5,000 bytes
// long; each query and header parameter likewise, and integers past
// int64; a body cut short (a Content-Length beyond what is sent), data
// after the JSON, and each field of the body's schema of the wrong type,
// past int64, over 1 MiB. Each must be a 4xx with /v1's error body, never
// a 5xx or a hang over 10 s, and the server must serve after each
// operation's cases.
func TestV1Routes(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile(filepath.Join(testenv.ModuleRoot(t), "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t)
	w := &v1World{t: t, s: s}
	w.make()
	var ops []string
	specOps := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			key := method + " " + path
			ops = append(ops, key)
			specOps[key] = op
			op.Parameters = append(append(openapi3.Parameters{}, item.Parameters...), op.Parameters...)
		}
	}
	sort.Strings(ops)
	for k := range v1Fixtures {
		if specOps[k] == nil {
			t.Errorf("v1Fixtures has %s, which api/openapi.yaml does not", k)
		}
	}
	var fails []failure
	total := 0
	for _, key := range ops {
		fx, ok := v1Fixtures[key]
		if !ok {
			t.Errorf("%s has no cases: give it a fixture in v1Fixtures", key)
			continue
		}
		op := specOps[key]
		params := map[string]string{}
		for k, v := range fx.params {
			params[k] = w.expand(v)
		}
		fx.params, fx.query = params, w.expand(fx.query)
		cases := v1Cases(doc, key, op, fx)
		if len(cases) == 0 {
			t.Errorf("%s: no case applies to it", key)
		}
		for i := range cases {
			cases[i].req.path = w.expand(cases[i].req.path)
		}
		total += len(cases)
		fails = append(fails, sweep(s.url, key, cases)...)
		if !w.alive() {
			fails = append(fails, failure{key, "after its cases", "the server or the fixtures' sandbox is gone"})
			w.make()
		}
	}
	t.Logf("%d operations, %d cases, %d failed", len(ops), total, len(fails))
	report(t, fails)
}

// v1Cases are key's cases: its valid call made hostile one part at a time.
func v1Cases(doc *openapi3.T, key string, op *openapi3.Operation, fx v1Fixture) []kase {
	method, tmpl, _ := strings.Cut(key, " ")
	secured := op.Security == nil && len(doc.Security) > 0 || op.Security != nil && len(*op.Security) > 0
	var bodyType string
	if op.RequestBody != nil && op.RequestBody.Value != nil {
		for ct := range op.RequestBody.Value.Content {
			bodyType = ct
		}
	}
	build := func(params map[string]string, query string, header http.Header, body []byte) request {
		p := tmpl
		for name, v := range fx.params {
			if hv, ok := params[name]; ok {
				v = hv
			} else if name != "path" && name != "key" {
				v = url.PathEscape(v)
			}
			p = strings.ReplaceAll(p, "{"+name+"}", v)
		}
		if query != "" {
			p += "?" + query
		}
		h := http.Header{}
		if secured {
			h.Set("Authorization", "Bearer "+keyAlpha)
		}
		if bodyType != "" {
			h.Set("Content-Type", bodyType)
		}
		for k, vs := range header {
			h[k] = vs
		}
		return request{method: method, path: p, header: h, body: body}
	}
	var body []byte
	if bodyType != "" {
		body = []byte(fx.body)
	}
	var cases []kase
	add := func(name string, r request, wt want) {
		cases = append(cases, kase{name: name, req: r, want: wt, wire: v1Wire})
	}
	if secured {
		add("forged key", build(nil, fx.query, http.Header{"Authorization": {"Bearer " + forged}}, body), refused)
	}
	names := make([]string, 0, len(fx.params))
	for n := range fx.params {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for how, v := range hostileSegments {
			add("path "+n+": "+how, build(map[string]string{n: v}, fx.query, nil, body), refused)
		}
	}
	for _, pr := range op.Parameters {
		p := pr.Value
		if p == nil || p.In == "path" {
			continue
		}
		values := map[string]string{"5,000 bytes": long}
		var ps *openapi3.Schema
		if p.Schema != nil {
			ps = p.Schema.Value
		}
		if ps != nil && ps.Type != nil && ps.Type.Includes("integer") {
			values = map[string]string{"past int64": string(hugeInt), "not a number": "x"}
			if ps.Min != nil {
				// Any integer is a valid exit_code_ne; not so where
				// the spec gives a minimum.
				values["min int64"] = string(minInt64)
			}
		} else if ps != nil && ps.Type != nil && ps.Type.Includes("boolean") {
			values["not a boolean"] = "maybe"
		}
		if p.In == "query" {
			values["NUL"] = "\x00"
			if p.Name == "path" {
				values["traversal"] = "../../etc/passwd"
				values["5,000-byte name"] = "/workspace/" + long
			}
		}
		for how, v := range values {
			switch p.In {
			case "query":
				q, _ := url.ParseQuery(fx.query)
				if q == nil {
					q = url.Values{}
				}
				q.Set(p.Name, v)
				add("query "+p.Name+": "+how, build(nil, q.Encode(), nil, body), refused)
			case "header":
				add("header "+p.Name+": "+how, build(nil, fx.query, http.Header{http.CanonicalHeaderKey(p.Name): {v}}, body), refused)
			}
		}
	}
	switch {
	case strings.HasPrefix(bodyType, "application/json"):
		r := build(nil, fx.query, nil, body)
		r.cutShort = true
		add("body cut short", r, refused)
		add("data after the JSON", build(nil, fx.query, nil, append(append([]byte(nil), body...), " x"...)), refused)
		add("two JSON values", build(nil, fx.query, nil, append(append([]byte(nil), body...), body...)), refused)
		schema := op.RequestBody.Value.Content[bodyType].Schema
		if schema != nil {
			for _, m := range mutations(body, schemaLeaves(schema.Value, nil)) {
				add(m.name, build(nil, fx.query, nil, m.body), m.want)
			}
		}
		for _, alt := range fx.alt {
			for _, m := range mutations([]byte(alt), exampleLeaves([]byte(alt))) {
				add(alt+" "+m.name, build(nil, fx.query, nil, m.body), m.want)
			}
		}
	case bodyType != "":
		r := build(nil, fx.query, nil, body)
		r.cutShort = true
		add("body cut short", r, refused)
	case !secured && len(fx.params) == 0:
		// A route without input ignores a body: a cut one must not hurt.
		r := build(nil, fx.query, nil, []byte("hello"))
		r.cutShort = true
		add("a body, cut short", r, answered)
	}
	for _, c := range fx.extra {
		if secured && c.req.header.Get("Authorization") == "" {
			c.req.header = c.req.header.Clone()
			c.req.header.Set("Authorization", "Bearer "+keyAlpha)
		}
		cases = append(cases, c)
	}
	return cases
}
