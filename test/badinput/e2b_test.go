package badinput

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/e2b"
	"github.com/corralhq/corral/internal/testenv"
)

// e2bFixture is a valid call of an E2B route, which its cases make hostile
// one part at a time; values may name what the sweep made ($sid, $pid...:
// e2bWorld).
type e2bFixture struct {
	path  string // with the path parameters filled in
	query string // a valid query, escaped
	body  string // a valid body: JSON, a Connect message, or raw
	// octet: the body is raw (application/octet-stream), not JSON.
	octet bool
	// ignored are query parameters the route reads nothing from: any
	// value is answered as if absent.
	ignored []string
	extra   []kase
}

// restFixtures has an entry for every control-plane route e2b.Server
// registers (Routes): a new route without one fails TestE2BRoutes.
var restFixtures = map[string]e2bFixture{
	"POST /sandboxes":                 {path: "/sandboxes", body: `{"templateID":"base","timeout":300,"metadata":{"K":"v"},"envVars":{"A":"1"},"network":{"allowOut":["example.com"]}}`},
	"POST /v2/sandboxes":              {path: "/v2/sandboxes", body: `{"templateID":"base","timeout":300}`},
	"GET /sandboxes":                  {path: "/sandboxes", query: "metadata=K%3Dv"},
	"GET /v2/sandboxes":               {path: "/v2/sandboxes", query: "metadata=K%3Dv&state=running&limit=10"},
	"GET /sandboxes/{id}":             {path: "/sandboxes/{id}"},
	"DELETE /sandboxes/{id}":          {path: "/sandboxes/{id}"},
	"POST /sandboxes/{id}/timeout":    {path: "/sandboxes/{id}/timeout", body: `{"timeout":3600}`},
	"POST /sandboxes/{id}/connect":    {path: "/sandboxes/{id}/connect", body: `{"timeout":3600}`},
	"POST /v2/sandboxes/{id}/connect": {path: "/v2/sandboxes/{id}/connect", body: `{"timeout":3600}`},
	"POST /sandboxes/{id}/pause":      {path: "/sandboxes/{id}/pause"},
	"POST /sandboxes/{id}/resume":     {path: "/sandboxes/{id}/resume", body: `{"timeout":3600}`},
	"GET /sandboxes/{id}/metrics":     {path: "/sandboxes/{id}/metrics", query: "start=1577836800&end=4102444800"},
	"POST /sandboxes/{id}/snapshots":  {path: "/sandboxes/{id}/snapshots", body: `{"name":"e2b-snap"}`},
	"POST /sandboxes/{id}/fork":       {path: "/sandboxes/{id}/fork", body: `{"count":1,"timeout":60}`},
	"GET /snapshots":                  {path: "/snapshots", query: "sandboxID=$sid&limit=5"},
	"DELETE /templates/{templateID}":  {path: "/templates/e2b-snap"},
}

// envdFixtures has an entry for every route internal/e2b/envd registers,
// Connect procedures included: a new one without one fails.
var envdFixtures = map[string]e2bFixture{
	"GET /health": {path: "/health"},
	// E2B's SDKs send the user a call runs as; every call runs as the
	// sandbox's one user here.
	"GET /files":                              {path: "/files", query: "path=%2Fworkspace%2Ff.txt&username=user", ignored: []string{"username"}},
	"POST /files":                             {path: "/files", query: "path=%2Fworkspace%2Fup.txt", body: "hello", octet: true, extra: []kase{multipartCut()}},
	"/process.Process/Start":                  {body: `{"process":{"cmd":"/bin/echo","args":["hi"],"envs":{"A":"1"},"cwd":"/workspace"},"stdin":false,"tag":"t"}`},
	"/process.Process/Connect":                {body: `{"process":{"pid":$pid}}`},
	"/process.Process/List":                   {body: `{}`},
	"/process.Process/SendInput":              {body: `{"process":{"pid":$pid},"input":{"stdin":"aGkK"}}`, extra: []kase{sendInputBound()}},
	"/process.Process/SendSignal":             {body: `{"process":{"pid":$victim},"signal":"SIGNAL_SIGCONT"}`},
	"/process.Process/CloseStdin":             {body: `{"process":{"pid":$closer}}`},
	"/process.Process/Update":                 {body: `{"process":{"pid":$term},"pty":{"size":{"cols":100,"rows":30}}}`},
	"/process.Process/StreamInput":            {body: `{"start":{"process":{"pid":$pid}}}`},
	"/filesystem.Filesystem/Stat":             {body: `{"path":"/workspace/f.txt"}`},
	"/filesystem.Filesystem/MakeDir":          {body: `{"path":"/workspace/d"}`},
	"/filesystem.Filesystem/Move":             {body: `{"source":"/workspace/f.txt","destination":"/workspace/f.txt"}`},
	"/filesystem.Filesystem/ListDir":          {body: `{"path":"/workspace","depth":2}`},
	"/filesystem.Filesystem/Remove":           {body: `{"path":"/workspace/gone.txt"}`},
	"/filesystem.Filesystem/WatchDir":         {body: `{"path":"/workspace","recursive":true}`},
	"/filesystem.Filesystem/CreateWatcher":    {body: `{"path":"/workspace","recursive":true}`},
	"/filesystem.Filesystem/GetWatcherEvents": {body: `{"watcherId":"$watcher"}`},
	"/filesystem.Filesystem/RemoveWatcher":    {body: `{"watcherId":"$watcher"}`},
}

// interpFixtures has an entry for every route internal/e2b/interp
// registers.
var interpFixtures = map[string]e2bFixture{
	"GET /health":                 {path: "/health"},
	"POST /execute":               {path: "/execute", body: `{"code":"1+1","language":"python"}`},
	"POST /contexts":              {path: "/contexts", body: `{"language":"python","cwd":"/workspace"}`},
	"GET /contexts":               {path: "/contexts"},
	"DELETE /contexts/{id}":       {path: "/contexts/{id}"},
	"POST /contexts/{id}/restart": {path: "/contexts/{id}/restart"},
	"/":                           {path: "/no/such/route"},
}

// multipartCut is a multipart upload cut short (the 500).
func multipartCut() kase {
	return kase{name: "multipart body cut short", want: refused, wire: e2bWire,
		req: request{method: "POST", path: "/files?path=%2Fworkspace%2Fm.txt", cutShort: true,
			header: http.Header{"Content-Type": {"multipart/form-data; boundary=b"}},
			body:   []byte("--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx")}}
}

// sendInputBound is the 4 MiB written to the stdin of a process
// that never reads, through envd.
func sendInputBound() kase {
	msg := fmt.Sprintf(`{"process":{"pid":$sleeper},"input":{"stdin":"%s"}}`, strings.Repeat("A", 4<<20/3*4))
	return kase{name: "4 MiB to the stdin of a process that never reads", want: bounded, wire: connectWire,
		req: request{method: "POST", path: "/process.Process/SendInput", whole: true,
			header: http.Header{"Content-Type": {"application/json"}}, body: []byte(msg)}}
}

// e2bWorld is what the E2B fixtures name: a sandbox made through E2B's
// API, with processes, files, a watcher and a code context.
type e2bWorld struct {
	t     *testing.T
	s     *server
	vars  map[string]string
	token string
}

func (w *e2bWorld) do(r request) answer {
	r.whole = true
	return send(w.s.url, r)
}

// traffic is the headers of a call into the sandbox's port.
func (w *e2bWorld) traffic(port int) http.Header {
	return http.Header{"E2b-Sandbox-Id": {w.vars["$sid"]}, "E2b-Sandbox-Port": {fmt.Sprint(port)},
		"X-Access-Token": {w.token}}
}

func (w *e2bWorld) must(a answer, what string, statuses ...int) []byte {
	w.t.Helper()
	if !slices.Contains(statuses, a.status) {
		w.t.Fatalf("set-up %s: %s", what, a)
	}
	return a.body
}

func (w *e2bWorld) make() {
	w.t.Helper()
	w.vars = map[string]string{}
	var c struct {
		SandboxID string `json:"sandboxID"`
		Token     string `json:"envdAccessToken"`
	}
	json.Unmarshal(w.must(w.do(request{method: "POST", path: "/sandboxes", body: []byte(`{"templateID":"base","timeout":3600}`),
		header: http.Header{"X-Api-Key": {keyAlpha}, "Content-Type": {"application/json"}}}), "create", 201), &c)
	w.vars["$sid"], w.token = c.SandboxID, c.Token
	v1 := http.Header{"Authorization": {"Bearer " + keyAlpha}, "Content-Type": {"application/json"}}
	for name, body := range map[string]string{"$pid": `{"cmd":["cat"],"stdin":true}`, "$closer": `{"cmd":["cat"],"stdin":true}`,
		"$sleeper": `{"cmd":["sleep","3600"],"stdin":true}`, "$victim": `{"cmd":["sleep","3600"]}`,
		"$term": `{"cmd":["sleep","3600"],"pty":{"cols":80,"rows":24}}`} {
		var p struct {
			PID int `json:"pid"`
		}
		json.Unmarshal(w.must(w.do(request{method: "POST", path: "/v1/sandboxes/" + c.SandboxID + "/processes", header: v1,
			body: []byte(body)}), "process", 201), &p)
		w.vars[name] = fmt.Sprint(p.PID)
	}
	w.must(w.do(request{method: "PUT", path: "/v1/sandboxes/" + c.SandboxID + "/files?path=/workspace/f.txt", header: v1,
		body: []byte("hello")}), "file", 200)
	h := w.traffic(e2b.EnvdPort)
	h.Set("Content-Type", "application/json")
	var wt struct {
		ID string `json:"watcherId"`
	}
	json.Unmarshal(w.must(w.do(request{method: "POST", path: "/filesystem.Filesystem/CreateWatcher", header: h,
		body: []byte(`{"path":"/workspace"}`)}), "watcher", 200), &wt)
	w.vars["$watcher"] = wt.ID
	h = w.traffic(e2b.InterpPort)
	h.Set("Content-Type", "application/json")
	var ctx struct {
		ID string `json:"id"`
	}
	json.Unmarshal(w.must(w.do(request{method: "POST", path: "/contexts", header: h, body: []byte(`{"language":"python"}`)}),
		"context", 200), &ctx)
	w.vars["$ctx"] = ctx.ID
}

// alive reports whether the server serves and the sandbox's envd answers.
func (w *e2bWorld) alive() bool {
	if !w.s.healthy() {
		return false
	}
	a := send(w.s.url, request{method: "GET", path: "/health", header: w.traffic(e2b.EnvdPort)})
	return a.status == http.StatusNoContent
}

func (w *e2bWorld) expand(s string) string {
	keys := make([]string, 0, len(w.vars))
	for k := range w.vars {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		s = strings.ReplaceAll(s, k, w.vars[k])
	}
	return s
}

// TestE2BRoutes sends every E2B route the malformed inputs of issue 26:
// the control-plane routes e2b.Server registers, and in the sandbox every
// route envd and the code interpreter register (read from their source),
// each Connect procedure as the kind of call it is. The cases are those
// of TestV1Routes, the body's fields taken from the fixture's example, and
// for the in-sandbox routes a forged access token (the same answer
// whether or not the sandbox exists), hostile sandbox and port headers,
// and for the Connect streams the malformed envelopes: a short prefix, a
// length beyond the body, trailing bytes, unknown flags, the compressed
// flag without an encoding. Each must be a 4xx with E2B's error body (a
// Connect error, for a procedure), never a 5xx, a server fault's Connect
// code or a hang over 10 s, and the sandbox must still answer after each
// route's cases.
func TestE2BRoutes(t *testing.T) {
	root := testenv.ModuleRoot(t)
	s := newServer(t)
	w := &e2bWorld{t: t, s: s}
	w.make()
	type service struct {
		name     string
		port     int
		routes   []route
		fixtures map[string]e2bFixture
	}
	var rest []route
	e2b.New(e2b.Config{}).Routes(func(pattern string, _ http.HandlerFunc) { rest = append(rest, route{pattern: pattern, kind: "http"}) })
	services := []service{
		{"rest", 0, rest, restFixtures},
		{"envd", e2b.EnvdPort, sourceRoutes(t, root, "internal/e2b/envd"), envdFixtures},
		{"interp", e2b.InterpPort, sourceRoutes(t, root, "internal/e2b/interp"), interpFixtures},
	}
	var fails []failure
	total, routes := 0, 0
	for _, sv := range services {
		known := map[string]bool{}
		for _, r := range sv.routes {
			known[r.pattern] = true
		}
		for k := range sv.fixtures {
			if !known[k] {
				t.Errorf("%s: the fixture %q names no route it registers", sv.name, k)
			}
		}
		for _, r := range sv.routes {
			key := sv.name + " " + r.pattern
			fx, ok := sv.fixtures[r.pattern]
			if !ok {
				t.Errorf("%s has no cases: give it a fixture in %sFixtures", key, sv.name)
				continue
			}
			fx.path, fx.query, fx.body = w.expand(fx.path), w.expand(fx.query), w.expand(fx.body)
			fx.path = strings.ReplaceAll(fx.path, "{id}", map[bool]string{true: w.vars["$sid"], false: w.vars["$ctx"]}[sv.port == 0])
			cases := e2bCases(w, sv.port, r, fx)
			for i := range cases {
				cases[i].req.path = w.expand(cases[i].req.path)
				cases[i].req.body = []byte(w.expand(string(cases[i].req.body)))
			}
			routes++
			total += len(cases)
			fails = append(fails, sweep(s.url, key, cases)...)
			if !w.alive() {
				fails = append(fails, failure{key, "after its cases", "the server or the fixtures' sandbox is gone"})
				w.make()
			}
		}
	}
	fails = append(fails, sameForgedAnswer(w)...)
	t.Logf("%d routes, %d cases, %d failed", routes, total, len(fails))
	report(t, fails)
}

// sameForgedAnswer: a forged token is answered alike whether or not the
// sandbox it names exists (else anyone can probe which ids exist).
func sameForgedAnswer(w *e2bWorld) []failure {
	var out []failure
	for _, port := range []int{e2b.EnvdPort, e2b.InterpPort} {
		h := w.traffic(port)
		h.Set("X-Access-Token", "alpha."+strings.Repeat("0", 64))
		there := w.do(request{method: "GET", path: "/health", header: h})
		h.Set("E2b-Sandbox-Id", "iabsent0000000000000")
		absent := w.do(request{method: "GET", path: "/health", header: h})
		if there.status != absent.status || string(there.body) != strings.ReplaceAll(string(absent.body), "iabsent0000000000000", w.vars["$sid"]) {
			out = append(out, failure{fmt.Sprintf("dispatch port %d", port), "forged token: a sandbox that exists, one that does not",
				"different answers: " + there.String() + " / " + absent.String()})
		}
	}
	return out
}

// e2bCases are r's cases: fx made hostile one part at a time.
func e2bCases(w *e2bWorld, port int, r route, fx e2bFixture) []kase {
	method, _, ok := strings.Cut(r.pattern, " ")
	if !ok || r.kind != "http" {
		method = "POST" // a Connect procedure
	}
	if r.pattern == "/" {
		method = "GET"
	}
	path := fx.path
	if path == "" {
		path = r.pattern
	}
	stream := r.kind == "server" || r.kind == "client" || r.kind == "bidi"
	wireOf := e2bWire
	switch {
	case stream:
		wireOf = streamWire
	case r.kind == "unary":
		wireOf = connectWire
	}
	base := func() http.Header {
		var h http.Header
		if port == 0 {
			h = http.Header{"X-Api-Key": {keyAlpha}}
		} else {
			h = w.traffic(port)
			h.Set("X-Access-Token", "$token")
		}
		switch {
		case stream:
			h.Set("Content-Type", "application/connect+json")
			h.Set("Connect-Protocol-Version", "1")
		case r.kind == "unary":
			h.Set("Content-Type", "application/json")
			h.Set("Connect-Protocol-Version", "1")
		case fx.octet:
			h.Set("Content-Type", "application/octet-stream")
		case fx.body != "":
			h.Set("Content-Type", "application/json")
		}
		return h
	}
	frame := func(msg []byte) []byte {
		if stream {
			return envelope(0, msg)
		}
		return msg
	}
	build := func(p, q string, h http.Header, body []byte) request {
		hh := base()
		for k, vs := range h {
			hh[k] = vs
		}
		if tok := hh.Get("X-Access-Token"); tok == "$token" {
			hh.Set("X-Access-Token", w.token)
		}
		if q != "" {
			p += "?" + q
		}
		return request{method: method, path: p, header: hh, body: body, whole: stream || r.kind == "unary"}
	}
	var body []byte
	if fx.body != "" || r.kind != "http" {
		body = frame([]byte(fx.body))
	}
	var cases []kase
	add := func(name string, rq request, wt want, wr wire) {
		cases = append(cases, kase{name: name, req: rq, want: wt, wire: wr})
	}
	if r.pattern == "/" {
		add("no such route", build(path, fx.query, nil, nil), refused, e2bWire)
		return cases
	}
	// Who may call: a forged key, a forged token, hostile dispatch headers.
	if port == 0 {
		add("forged key", build(path, fx.query, http.Header{"X-Api-Key": {forged}}, body), refused, e2bWire)
	} else {
		// answered as a sandbox gone (sameForgedAnswer checks it is the same
		// answer whether the sandbox exists or not).
		add("forged token", build(path, fx.query, http.Header{"X-Access-Token": {"alpha." + strings.Repeat("0", 64)}}, body), unknown, e2bWire)
		add("token of no tenant's shape", build(path, fx.query, http.Header{"X-Access-Token": {"nodot"}}, body), refused, e2bWire)
		for how, v := range map[string]string{"past int64": string(hugeInt), "negative": "-1", "not a number": "x"} {
			add("E2b-Sandbox-Port: "+how, build(path, fx.query, http.Header{"E2b-Sandbox-Port": {v}}, body), refused, e2bWire)
		}
		for how, v := range map[string]string{"traversal": "../../etc", "5,000 bytes": long} {
			add("E2b-Sandbox-Id: "+how, build(path, fx.query, http.Header{"E2b-Sandbox-Id": {v}}, body), unknown, e2bWire)
		}
	}
	// Path parameters.
	if strings.Contains(r.pattern, "{id}") {
		id := w.vars["$sid"]
		if port != 0 {
			id = w.vars["$ctx"]
		}
		for how, v := range hostileSegments {
			add("path id: "+how, build(strings.Replace(path, id, v, 1), fx.query, nil, body), refused, wireOf)
		}
	}
	// Query parameters.
	q, _ := url.ParseQuery(fx.query)
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		values := map[string]string{"5,000 bytes": long, "NUL": "\x00"}
		if _, err := fmt.Sscan(q.Get(n), new(int64)); err == nil && !strings.Contains(q.Get(n), "=") {
			values = map[string]string{"past int64": string(hugeInt), "min int64": string(minInt64), "not a number": "x"}
		}
		if n == "path" {
			values["traversal"] = "../../etc/passwd"
			values["5,000-byte name"] = "/workspace/" + long
		}
		wt := refused
		if slices.Contains(fx.ignored, n) {
			wt = answered
		}
		for how, v := range values {
			qq, _ := url.ParseQuery(fx.query)
			qq.Set(n, v)
			add("query "+n+": "+how, build(path, qq.Encode(), nil, body), wt, wireOf)
		}
	}
	// The body.
	switch {
	case fx.octet:
		rq := build(path, fx.query, nil, body)
		rq.cutShort = true
		add("body cut short", rq, refused, wireOf)
	case fx.body != "" || r.kind != "http":
		rq := build(path, fx.query, nil, body)
		rq.cutShort = true
		add("body cut short", rq, refused, wireOf)
		msg := []byte(fx.body)
		add("data after the JSON", build(path, fx.query, nil, frame(append(append([]byte(nil), msg...), " x"...))), refused, wireOf)
		add("two JSON values", build(path, fx.query, nil, frame(append(append([]byte(nil), msg...), msg...))), refused, wireOf)
		if stream {
			for how, b := range map[string][]byte{
				"envelope: a short prefix":                 {0, 0, 0},
				"envelope: a length beyond the body":       append([]byte{0, 0, 0, 0, 100}, msg...),
				"envelope: trailing bytes":                 append(envelope(0, msg), 'x'),
				"envelope: unknown flags":                  envelope(0x80, msg),
				"envelope: compressed without an encoding": envelope(1, msg),
			} {
				add(how, build(path, fx.query, nil, b), refused, streamWire)
			}
		}
		for _, m := range mutations(msg, exampleLeaves(msg)) {
			add(m.name, build(path, fx.query, nil, frame(m.body)), m.want, wireOf)
		}
	}
	for _, c := range fx.extra {
		c.req.header = c.req.header.Clone()
		for k, vs := range base() {
			if c.req.header.Get(k) == "" {
				c.req.header[k] = vs
			}
		}
		if c.req.header.Get("X-Access-Token") == "$token" {
			c.req.header.Set("X-Access-Token", w.token)
		}
		cases = append(cases, c)
	}
	return cases
}
