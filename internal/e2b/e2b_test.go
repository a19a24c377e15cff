package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/api"
	"github.com/corralhq/corral/internal/blob/local"
	"github.com/corralhq/corral/internal/cluster"
	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/session"
	"github.com/corralhq/corral/internal/snapshot"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/internal/workspace"
	"github.com/corralhq/corral/sandbox"
)

// TestMain serves as the agent of the fake sandboxes (testenv.FakeEngine).
func TestMain(m *testing.M) {
	testenv.FakeMain(m)
}

const (
	keyA = "e2b_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	keyB = "e2b_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// unit is Corral's API with E2B's beside it, on one node of a cluster on a
// SQLite store, over live sandboxes of the fake runtime.
type unit struct {
	t         *testing.T
	url       string
	sandboxes *live.Manager
}

// seen is what a test service saw of a call.
type seen struct {
	Service string
	Target  target.Target
	OK      bool
	Path    string
}

// service answers with what it saw, as JSON.
func service(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg, ok := target.From(r.Context())
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(seen{Service: name, Target: tg, OK: ok, Path: r.URL.Path})
	})
}

func newUnit(t *testing.T, domain string) *unit {
	t.Helper()
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "corral.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.DiscardHandler)
	cl := cluster.New(cluster.Config{ID: "node", Address: "127.0.0.1:1", Heartbeat: time.Second, LostAfter: time.Minute}, st, log)
	if err := cl.Beat(t.Context()); err != nil {
		t.Fatal(err)
	}
	table, err := workspace.Open(t.Context(), workspace.Config{Dir: t.TempDir(), ReapInterval: time.Minute}, cl, log)
	if err != nil {
		t.Fatal(err)
	}
	lc := live.DefaultConfig()
	blobs, err := local.New(t.TempDir(), "http://127.0.0.1:1", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	if lc.Snapshots, err = snapshot.New(blobs, snapshot.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lc.Snapshots.Close() })
	m := live.New(lc, live.Deps{Table: table, Engine: f.Engine, Fleet: f.Fleet, Publisher: cl, Log: log})
	t.Cleanup(m.Close)
	sessions := session.New(session.DefaultConfig(), table, f.Engine, f.Fleet, log)
	t.Cleanup(sessions.Close)
	auth, err := api.NewAuth([]api.Tenant{
		{Name: "alpha", KeyHashes: []string{api.HashKey(keyA)}},
		{Name: "beta", KeyHashes: []string{api.HashKey(keyB)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := api.New(api.Config{}, api.Deps{Auth: auth, Metrics: metrics.New(), Log: log,
		Sessions: sessions, Sandboxes: m, Cluster: cl})
	hs := httptest.NewServer(srv.Handler(New(Config{Sandboxes: m, Keys: auth, Node: srv, Domain: domain,
		Envd: service("envd"), Interp: service("interp"), Log: log})))
	t.Cleanup(hs.Close)
	return &unit{t: t, url: hs.URL, sandboxes: m}
}

// do makes a call with headers h (key: value pairs) and returns the
// status, the body and the response's headers.
func (u *unit) do(method, path, body string, h ...string) (int, []byte, http.Header) {
	u.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(u.t.Context(), method, u.url+path, rd)
	if err != nil {
		u.t.Fatal(err)
	}
	for i := 0; i+1 < len(h); i += 2 {
		if h[i] == "Host" {
			req.Host = h[i+1]
			continue
		}
		req.Header.Set(h[i], h[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		u.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		u.t.Fatal(err)
	}
	return res.StatusCode, b, res.Header
}

// call makes a control-plane call with key, expects status and decodes
// the answer into out (if not nil).
func (u *unit) call(key, method, path, body string, status int, out any) http.Header {
	u.t.Helper()
	code, b, h := u.do(method, path, body, "X-API-Key", key)
	if code != status {
		u.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, code, status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			u.t.Fatalf("%s %s: answer %s: %v", method, path, b, err)
		}
	}
	return h
}

// e2bError checks an answer is E2B's error body with status.
func e2bError(t *testing.T, what string, code int, b []byte, status int) string {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if code != status {
		t.Fatalf("%s: status %d, want %d; body %s", what, code, status, b)
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Code != status || e.Message == "" {
		t.Fatalf("%s: body %s is not E2B's {code: %d, message}", what, b, status)
	}
	return e.Message
}

func (u *unit) create(key, body string) created {
	u.t.Helper()
	var c created
	u.call(key, "POST", "/v2/sandboxes", body, http.StatusCreated, &c)
	return c
}

var e2bID = regexp.MustCompile(`^i[0-9a-f]{19}$`)

// TestCreateGetKill: create through both paths answers E2B's Sandbox
// (a fresh E2B id, the tenant's access token, domain null); get answers
// the detail; timeout moves the end; connect answers the same token;
// metrics answer a reading, bounded by start and end; kill is 204, then
// 404 everywhere.
func TestCreateGetKill(t *testing.T) {
	u := newUnit(t, "")
	before := time.Now().Add(-time.Second)
	var raw map[string]any
	u.call(keyA, "POST", "/sandboxes", `{"templateID":"base","timeout":60,"metadata":{"app":"x"},"envVars":{"GREETING":"hi"},"secure":true,"allow_internet_access":false,"autoPause":false}`,
		http.StatusCreated, &raw)
	if v, ok := raw["domain"]; !ok || v != nil {
		t.Errorf("create answer %v: want \"domain\": null", raw)
	}
	c := u.create(keyA, `{"templateID":"base","timeout":60,"metadata":{"app":"x"},"mcp":null,"iam":{"tokens":{}}}`)
	if !e2bID.MatchString(c.SandboxID) {
		t.Errorf("sandboxID %q: want i and 19 hex digits", c.SandboxID)
	}
	if !regexp.MustCompile(`^alpha\.[0-9a-f]{64}$`).MatchString(c.EnvdAccessToken) {
		t.Errorf("envdAccessToken %q: want alpha. and 64 hex digits", c.EnvdAccessToken)
	}
	if c.EnvdVersion != DefaultEnvdVersion || c.ClientID == "" || c.TemplateID == "" || c.Domain != nil {
		t.Errorf("create answer %+v", c)
	}
	if c.SandboxID == raw["sandboxID"] {
		t.Error("two creates gave one id")
	}

	var d detail
	u.call(keyA, "GET", "/sandboxes/"+c.SandboxID, "", http.StatusOK, &d)
	if d.SandboxID != c.SandboxID || d.State != "running" || d.Metadata["app"] != "x" || d.EnvdVersion != DefaultEnvdVersion ||
		d.CPUCount < 1 || d.MemoryMB <= 0 || d.DiskSizeMB <= 0 || d.StartedAt.Before(before) {
		t.Errorf("detail %+v", d)
	}
	if got := d.EndAt.Sub(d.StartedAt); got != time.Minute {
		t.Errorf("endAt - startedAt = %s, want the 60 s asked", got)
	}
	// Authorization: Bearer works as well as X-API-Key.
	if code, b, _ := u.do("GET", "/sandboxes/"+c.SandboxID, "", "Authorization", "Bearer "+keyA); code != http.StatusOK {
		t.Errorf("GET with a bearer key: %d %s", code, b)
	}

	u.call(keyA, "POST", "/sandboxes/"+c.SandboxID+"/timeout", `{"timeout":600}`, http.StatusNoContent, nil)
	var d2 detail
	u.call(keyA, "GET", "/sandboxes/"+c.SandboxID, "", http.StatusOK, &d2)
	if end := time.Until(d2.EndAt); end < 590*time.Second || end > 601*time.Second {
		t.Errorf("after timeout 600: endAt is %s from now", end)
	}

	var cn created
	u.call(keyA, "POST", "/v2/sandboxes/"+c.SandboxID+"/connect", `{"timeout":10}`, http.StatusOK, &cn)
	if cn.SandboxID != c.SandboxID || cn.EnvdAccessToken != c.EnvdAccessToken || cn.EnvdVersion != DefaultEnvdVersion {
		t.Errorf("connect %+v, want the sandbox and its token %q", cn, c.EnvdAccessToken)
	}
	// A shorter timeout than the sandbox has left leaves its end.
	var d3 detail
	u.call(keyA, "GET", "/sandboxes/"+c.SandboxID, "", http.StatusOK, &d3)
	if !d3.EndAt.Equal(d2.EndAt) {
		t.Errorf("connect with a shorter timeout moved endAt from %s to %s", d2.EndAt, d3.EndAt)
	}
	u.call(keyA, "POST", "/sandboxes/"+c.SandboxID+"/connect", `{}`, http.StatusOK, &cn)

	// A new sandbox answers one reading, in E2B's names (timestampUnix
	// and memCache too); start and end bound them by the second.
	var raws []map[string]any
	u.call(keyA, "GET", "/sandboxes/"+c.SandboxID+"/metrics", "", http.StatusOK, &raws)
	if len(raws) != 1 {
		t.Fatalf("metrics %v, want one reading", raws)
	}
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memCache", "memTotal", "diskUsed", "diskTotal"} {
		if _, ok := raws[0][k]; !ok {
			t.Errorf("a reading %v without %s", raws[0], k)
		}
	}
	var ms []metric
	u.call(keyA, "GET", "/sandboxes/"+c.SandboxID+"/metrics", "", http.StatusOK, &ms)
	m := ms[0]
	if m.CPUCount != d.CPUCount || m.MemTotal != d.MemoryMB<<20 || m.DiskTotal != d.DiskSizeMB<<20 ||
		m.TimestampUnix != m.Timestamp.Unix() || m.CPUUsedPct < 0 || m.CPUUsedPct > 100 {
		t.Errorf("reading %+v of %+v", m, d)
	}
	sec := m.TimestampUnix
	for q, want := range map[string]int{
		fmt.Sprintf("?start=%d", sec):                 1,
		fmt.Sprintf("?start=%d", sec+1):               0,
		fmt.Sprintf("?end=%d", sec):                   1,
		fmt.Sprintf("?end=%d", sec-1):                 0,
		fmt.Sprintf("?start=%d&end=%d", sec, sec):     1,
		fmt.Sprintf("?start=%d&end=%d", sec-9, sec-1): 0,
	} {
		var got []metric
		u.call(keyA, "GET", "/sandboxes/"+c.SandboxID+"/metrics"+q, "", http.StatusOK, &got)
		if got == nil || len(got) != want {
			t.Errorf("metrics%s: %v, want %d", q, got, want)
		}
	}
	for _, q := range []string{"?start=x", "?end=-1", "?start=1e3", fmt.Sprintf("?start=%d&end=%d", sec, sec-1), "?end=99999999999999"} {
		code, b, _ := u.do("GET", "/sandboxes/"+c.SandboxID+"/metrics"+q, "", "X-API-Key", keyA)
		e2bError(t, "metrics"+q, code, b, http.StatusBadRequest)
	}

	u.call(keyA, "DELETE", "/sandboxes/"+c.SandboxID, "", http.StatusNoContent, nil)
	for _, call := range [][2]string{{"DELETE", ""}, {"GET", ""}, {"POST", "/timeout"}, {"POST", "/connect"}, {"GET", "/metrics"}} {
		body := ""
		if call[0] == "POST" {
			body = `{"timeout":30}`
		}
		code, b, _ := u.do(call[0], "/sandboxes/"+c.SandboxID+call[1], body, "X-API-Key", keyA)
		e2bError(t, call[0]+" "+call[1]+" after kill", code, b, http.StatusNotFound)
	}
}

// TestErrors: E2B's error bodies for a missing or unknown key, an unknown
// template, a body that is not JSON, bad timeouts, ids, list queries and
// tokens; pause and resume of a sandbox that is not there.
func TestErrors(t *testing.T) {
	u := newUnit(t, "")
	// Pause and resume of a sandbox that is not there.
	pauseStatus := http.StatusNotFound
	for _, c := range []struct {
		what, method, path, body string
		h                        []string
		status                   int
		message                  string
	}{
		{"no key", "POST", "/v2/sandboxes", `{"templateID":"base"}`, nil, 401, ""},
		{"unknown key", "GET", "/v2/sandboxes", "", []string{"X-API-Key", "e2b_0000000000000000000000000000000000000000"}, 401, ""},
		{"a /v1 bearer key on E2B is still a key, an unknown one", "GET", "/v2/sandboxes", "", []string{"Authorization", "Bearer nope"}, 401, ""},
		{"unknown template", "POST", "/v2/sandboxes", `{"templateID":"no-such-template"}`, []string{"X-API-Key", keyA}, 404, "template 'no-such-template' not found"},
		{"no template", "POST", "/v2/sandboxes", `{"timeout":5}`, []string{"X-API-Key", keyA}, 400, ""},
		{"not JSON", "POST", "/v2/sandboxes", `{"templateID":`, []string{"X-API-Key", keyA}, 400, ""},
		{"negative timeout", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":-1}`, []string{"X-API-Key", keyA}, 400, ""},
		{"timeout over the maximum", "POST", "/v2/sandboxes", `{"templateID":"base","timeout":100000000}`, []string{"X-API-Key", keyA}, 400, ""},
		{"bad metadata", "POST", "/v2/sandboxes", `{"templateID":"base","metadata":{"":"x"}}`, []string{"X-API-Key", keyA}, 400, ""},
		{"an id that cannot be", "GET", "/sandboxes/-x", "", []string{"X-API-Key", keyA}, 404, ""},
		{"no such sandbox", "GET", "/sandboxes/i0000000000000000000", "", []string{"X-API-Key", keyA}, 404, ""},
		{"pause", "POST", "/sandboxes/i0000000000000000000/pause", "", []string{"X-API-Key", keyA}, pauseStatus, ""},
		{"resume", "POST", "/sandboxes/i0000000000000000000/resume", `{}`, []string{"X-API-Key", keyA}, pauseStatus, ""},
		{"bad limit", "GET", "/v2/sandboxes?limit=0", "", []string{"X-API-Key", keyA}, 400, ""},
		{"bad state", "GET", "/v2/sandboxes?state=dead", "", []string{"X-API-Key", keyA}, 400, ""},
		{"bad next token", "GET", "/v2/sandboxes?nextToken=%21%21", "", []string{"X-API-Key", keyA}, 400, ""},
		{"bad metadata filter", "GET", "/v2/sandboxes?metadata=a%3D%25zz", "", []string{"X-API-Key", keyA}, 400, ""},
		{"timeout without one", "POST", "/sandboxes/i0000000000000000000/timeout", `{}`, []string{"X-API-Key", keyA}, 400, ""},
	} {
		code, b, _ := u.do(c.method, c.path, c.body, c.h...)
		msg := e2bError(t, c.what, code, b, c.status)
		if c.message != "" && msg != c.message {
			t.Errorf("%s: message %q, want %q", c.what, msg, c.message)
		}
	}
	// Nothing was made by the refused creates.
	if got := u.sandboxes.List("alpha"); len(got) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", got)
	}
	// /v1 is untouched: its own error shape.
	code, b, _ := u.do("GET", "/v1/sandboxes/nope", "", "Authorization", "Bearer "+keyA)
	if code != http.StatusNotFound || !bytes.Contains(b, []byte(`"error"`)) {
		t.Errorf("/v1 answer %d %s", code, b)
	}
}

// TestTenants: a tenant never sees another's sandbox: get, timeout,
// connect, metrics and kill are 404, lists leave it out, and it lives on.
func TestTenants(t *testing.T) {
	u := newUnit(t, "")
	a := u.create(keyA, `{"templateID":"base","metadata":{"who":"alpha"}}`)
	for _, call := range [][3]string{{"GET", "", ""}, {"POST", "/timeout", `{"timeout":5}`}, {"POST", "/connect", `{}`},
		{"GET", "/metrics", ""}, {"DELETE", "", ""}} {
		code, b, _ := u.do(call[0], "/sandboxes/"+a.SandboxID+call[1], call[2], "X-API-Key", keyB)
		e2bError(t, "beta: "+call[0]+" "+call[1], code, b, http.StatusNotFound)
	}
	for _, path := range []string{"/v2/sandboxes", "/sandboxes", "/v2/sandboxes?metadata=who%3Dalpha"} {
		var l []listed
		u.call(keyB, "GET", path, "", http.StatusOK, &l)
		if len(l) != 0 {
			t.Errorf("beta's %s lists %+v", path, l)
		}
	}
	var d detail
	u.call(keyA, "GET", "/sandboxes/"+a.SandboxID, "", http.StatusOK, &d)
	if time.Until(d.EndAt) < 4*time.Minute {
		t.Errorf("beta's timeout reached alpha's sandbox: ends in %s", time.Until(d.EndAt))
	}
}

// metadataQuery encodes a metadata filter as the SDKs do: pairs
// URI-encoded, joined as a form, and the whole encoded once more as the
// query parameter.
func metadataQuery(md map[string]string) string {
	inner := url.Values{}
	for k, v := range md {
		inner.Set(url.PathEscape(k), url.PathEscape(v))
	}
	return "metadata=" + url.QueryEscape(inner.Encode())
}

// TestList: v2 filters by metadata (awkward characters included), state
// and template, and pages with X-Next-Token in both orders, each sandbox
// once; v1 lists the running ones.
func TestList(t *testing.T) {
	u := newUnit(t, "")
	odd := map[string]string{"key with space&=": "v/a+l%ue"}
	var mine []string
	for i := range 3 {
		md := `{"team":"red","n":"` + string(rune('0'+i)) + `","key with space&=":"v/a+l%ue"}`
		mine = append(mine, u.create(keyA, `{"templateID":"base","metadata":`+md+`}`).SandboxID)
	}
	other := u.create(keyA, `{"templateID":"base","metadata":{"team":"blue"}}`).SandboxID

	ids := func(l []listed) []string {
		var out []string
		for _, s := range l {
			out = append(out, s.SandboxID)
		}
		slices.Sort(out)
		return out
	}
	slices.Sort(mine)
	for _, q := range []string{metadataQuery(map[string]string{"team": "red"}), metadataQuery(odd),
		metadataQuery(map[string]string{"team": "red"}) + "&state=running,paused", metadataQuery(odd) + "&state=running"} {
		var l []listed
		u.call(keyA, "GET", "/v2/sandboxes?"+q, "", http.StatusOK, &l)
		if got := ids(l); !slices.Equal(got, mine) {
			t.Errorf("?%s lists %v, want %v", q, got, mine)
		}
	}
	var l []listed
	u.call(keyA, "GET", "/v2/sandboxes?state=paused", "", http.StatusOK, &l)
	if len(l) != 0 {
		t.Errorf("state=paused lists %+v", l)
	}
	u.call(keyA, "GET", "/v2/sandboxes?"+metadataQuery(map[string]string{"team": "red", "n": "1"}), "", http.StatusOK, &l)
	if len(l) != 1 || l[0].Metadata["n"] != "1" || l[0].Metadata["key with space&="] != "v/a+l%ue" {
		t.Errorf("team=red&n=1 lists %+v", l)
	}
	u.call(keyA, "GET", "/v2/sandboxes?template=nothing-of-that-name", "", http.StatusOK, &l)
	if len(l) != 0 {
		t.Errorf("an unknown template lists %+v", l)
	}

	all := append(slices.Clone(mine), other)
	slices.Sort(all)
	for _, order := range []string{"", "&order=asc", "&order=desc"} {
		var got []listed
		token, pages := "", 0
		for {
			q := "/v2/sandboxes?limit=1" + order
			if token != "" {
				q += "&nextToken=" + url.QueryEscape(token)
			}
			var page []listed
			h := u.call(keyA, "GET", q, "", http.StatusOK, &page)
			pages++
			got = append(got, page...)
			if token = h.Get("X-Next-Token"); token == "" || pages > 10 {
				break
			}
			if len(page) != 1 {
				t.Fatalf("a page of limit 1 with a next token has %d sandboxes", len(page))
			}
		}
		for i := 1; i < len(got); i++ {
			if order == "&order=asc" && got[i].StartedAt.Before(got[i-1].StartedAt) ||
				order != "&order=asc" && got[i].StartedAt.After(got[i-1].StartedAt) {
				t.Errorf("order %q: %s before %s", order, got[i-1].StartedAt, got[i].StartedAt)
			}
		}
		if ids(got) == nil || !slices.Equal(ids(got), all) || pages != 4 {
			t.Errorf("order %q: pages %d gave %v, want each of %v once in 4 pages", order, pages, ids(got), all)
		}
	}

	// A token of one order is refused in the other.
	h := u.call(keyA, "GET", "/v2/sandboxes?limit=1&order=asc", "", http.StatusOK, nil)
	code, b, _ := u.do("GET", "/v2/sandboxes?order=desc&nextToken="+url.QueryEscape(h.Get("X-Next-Token")), "", "X-API-Key", keyA)
	e2bError(t, "a token of the other order", code, b, http.StatusBadRequest)

	var v1 []listed
	u.call(keyA, "GET", "/sandboxes?"+metadataQuery(map[string]string{"team": "blue"}), "", http.StatusOK, &v1)
	if len(v1) != 1 || v1[0].SandboxID != other || v1[0].State != "running" {
		t.Errorf("v1 team=blue lists %+v, want %s", v1, other)
	}
}

// TestTraffic: in-sandbox traffic, by header or host, reaches the service
// of its port with its Target once its access token matched; a missing
// token, or one of no tenant's shape, is 401; a wrong one, another
// tenant's, or one for a sandbox that is gone, 502 as a sandbox gone (one
// answer: TestTokensTellNothing); other ports 502. A sandbox made through
// /v1 has no token until connect mints one.
func TestTraffic(t *testing.T) {
	u := newUnit(t, "sb.example.test")
	a := u.create(keyA, `{"templateID":"base"}`)
	b := u.create(keyB, `{"templateID":"base"}`)
	send := func(id, port, token string, more ...string) (int, []byte) {
		t.Helper()
		h := append([]string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", port}, more...)
		if token != "" {
			h = append(h, "X-Access-Token", token)
		}
		code, body, _ := u.do("POST", "/process.Process/Start", `{}`, h...)
		return code, body
	}
	check := func(what string, code int, body []byte, service, id, tenant string) {
		t.Helper()
		var s seen
		if code != http.StatusOK || json.Unmarshal(body, &s) != nil {
			t.Fatalf("%s: %d %s", what, code, body)
		}
		want := seen{Service: service, Target: target.Target{Tenant: tenant, SandboxID: id}, OK: true, Path: "/process.Process/Start"}
		if s != want {
			t.Errorf("%s: the service saw %+v, want %+v", what, s, want)
		}
	}
	code, body := send(a.SandboxID, "49983", a.EnvdAccessToken)
	check("envd", code, body, "envd", a.SandboxID, "alpha")
	code, body = send(a.SandboxID, "49999", a.EnvdAccessToken)
	check("interp", code, body, "interp", a.SandboxID, "alpha")
	code, body = send(b.SandboxID, "49983", b.EnvdAccessToken)
	check("beta's envd", code, body, "envd", b.SandboxID, "beta")
	// The code interpreter's context calls carry the token only as
	// E2B-Traffic-Access-Token, which create answers as trafficAccessToken.
	if a.TrafficAccessToken != a.EnvdAccessToken {
		t.Errorf("trafficAccessToken %q, want the access token %q", a.TrafficAccessToken, a.EnvdAccessToken)
	}
	code, body, _ = u.do("POST", "/process.Process/Start", `{}`, "E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", "49999",
		"E2B-Traffic-Access-Token", a.TrafficAccessToken)
	check("interp by the traffic token", code, body, "interp", a.SandboxID, "alpha")
	code, body, _ = u.do("POST", "/process.Process/Start", `{}`, "E2b-Sandbox-Id", a.SandboxID, "E2b-Sandbox-Port", "49999",
		"E2B-Traffic-Access-Token", "alpha."+strings.Repeat("1", 64))
	e2bError(t, "a wrong traffic token", code, body, http.StatusBadGateway)
	// The host form, an API key beside it changing nothing.
	code, body, _ = u.do("POST", "/process.Process/Start", `{}`, "Host", "49999-"+a.SandboxID+".sb.example.test:443",
		"X-Access-Token", a.EnvdAccessToken)
	check("host form", code, body, "interp", a.SandboxID, "alpha")

	code, body = send(a.SandboxID, "49983", "")
	e2bError(t, "no token", code, body, http.StatusUnauthorized)
	wrong := "alpha." + strings.Repeat("0", 64)
	// A token that does not open the sandbox finds it gone (502, as E2B's
	// proxy answers), whoever has it; one of no tenant's shape is refused.
	for _, c := range []struct {
		what, id, token string
		want            int
	}{
		{"a wrong token", a.SandboxID, wrong, http.StatusBadGateway},
		{"a token of no tenant's shape", a.SandboxID, "nodot", http.StatusUnauthorized},
		{"beta's token for alpha's sandbox", a.SandboxID, b.EnvdAccessToken, http.StatusBadGateway},
		{"alpha's token for beta's sandbox", b.SandboxID, a.EnvdAccessToken, http.StatusBadGateway},
		{"beta's sandbox as alpha", b.SandboxID, "alpha." + strings.TrimPrefix(b.EnvdAccessToken, "beta."), http.StatusBadGateway},
		{"an id that cannot be", "../x", a.EnvdAccessToken, http.StatusBadGateway},
		{"no such sandbox", "i0000000000000000000", a.EnvdAccessToken, http.StatusBadGateway},
	} {
		code, body := send(c.id, "49983", c.token)
		e2bError(t, c.what, code, body, c.want)
	}
	code, body = send(a.SandboxID, strconv.Itoa(closedPort(t)), a.EnvdAccessToken)
	if msg := e2bError(t, "a port nothing listens on", code, body, http.StatusBadGateway); !strings.Contains(msg, "nothing listens on port") {
		t.Errorf("a port nothing listens on: %q", msg)
	}
	code, body = send(a.SandboxID, "http", a.EnvdAccessToken)
	e2bError(t, "a port that is no number", code, body, http.StatusBadRequest)
	code, body, _ = u.do("GET", "/health", "", "Host", "49983-"+a.SandboxID+".elsewhere.test", "X-Access-Token", a.EnvdAccessToken)
	if code != http.StatusNotFound || bytes.Contains(body, []byte("envd")) {
		t.Errorf("a host of another domain: %d %s, want the API's own 404", code, body)
	}

	// Made through /v1: no token until connect.
	_, v1, err := u.sandboxes.Create(t.Context(), "alpha", sandbox.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	code, body = send(v1.SandboxID, "49983", wrong)
	e2bError(t, "a /v1 sandbox before connect", code, body, http.StatusBadGateway)
	var c1, c2 created
	u.call(keyA, "POST", "/v2/sandboxes/"+v1.SandboxID+"/connect", `{}`, http.StatusOK, &c1)
	u.call(keyA, "POST", "/v2/sandboxes/"+v1.SandboxID+"/connect", `{}`, http.StatusOK, &c2)
	if !strings.HasPrefix(c1.EnvdAccessToken, "alpha.") || c1.EnvdAccessToken != c2.EnvdAccessToken {
		t.Fatalf("connects to a /v1 sandbox gave tokens %q and %q, want one of alpha", c1.EnvdAccessToken, c2.EnvdAccessToken)
	}
	code, body = send(v1.SandboxID, "49983", c1.EnvdAccessToken)
	check("a /v1 sandbox after connect", code, body, "envd", v1.SandboxID, "alpha")

	// Killed: its token opens nothing.
	u.call(keyA, "DELETE", "/sandboxes/"+a.SandboxID, "", http.StatusNoContent, nil)
	code, body = send(a.SandboxID, "49983", a.EnvdAccessToken)
	e2bError(t, "a killed sandbox", code, body, http.StatusBadGateway)
}

// TestParseMetadata: E2B's filter form, with its double encoding.
func TestParseMetadata(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want map[string]string
		bad  bool
	}{
		{"", map[string]string{}, false},
		{"a=1&b=2", map[string]string{"a": "1", "b": "2"}, false},
		{"a%2520b=c%2526d", map[string]string{"a b": "c&d"}, false},
		{"a=", map[string]string{"a": ""}, false},
		{"=v", nil, true},
		{"a=%zz", nil, true},
		{"a=%25zz", nil, true},
	} {
		got, err := parseMetadata(c.raw)
		if (err != nil) != c.bad || (!c.bad && !maps.Equal(got, c.want)) {
			t.Errorf("parseMetadata(%q) = %v, %v; want %v (refused %v)", c.raw, got, err, c.want, c.bad)
		}
	}
}

// TestIDs: the shapes of ids, keys and tokens.
func TestIDs(t *testing.T) {
	seenIDs := map[string]bool{}
	for range 100 {
		id := NewSandboxID()
		if !e2bID.MatchString(id) || !validate.ValidID(id) || seenIDs[id] {
			t.Fatalf("NewSandboxID() = %q", id)
		}
		seenIDs[id] = true
	}
	if k := NewAPIKey(); !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(k) {
		t.Errorf("NewAPIKey() = %q", k)
	}
	tok := newAccessToken("acme")
	if tenant, ok := tokenTenant(tok); !ok || tenant != "acme" {
		t.Errorf("tokenTenant(%q) = %q, %v", tok, tenant, ok)
	}
	for _, bad := range []string{"", "acme", ".x", "acme."} {
		if _, ok := tokenTenant(bad); ok {
			t.Errorf("tokenTenant(%q) accepted", bad)
		}
	}
	if tokenMatches("", "") || tokenMatches("a", "") || !tokenMatches("a.b", "a.b") || tokenMatches("a.b", "a.c") {
		t.Error("tokenMatches")
	}
}

// TestTemplates: base runs the default python image, the code-interpreter
// templates the python image, any other name that image.
func TestTemplates(t *testing.T) {
	for _, c := range []struct {
		template        string
		language, image string
	}{
		{"base", "python", ""},
		{"code-interpreter", "python", "python"},
		{"code-interpreter-v1", "python", "python"},
		{"node", "", "node"},
	} {
		r := templateRequest(c.template)
		if r.Language != c.language || r.Image != c.image {
			t.Errorf("template %s: language %q image %q, want %q %q", c.template, r.Language, r.Image, c.language, c.image)
		}
	}
}

// TestLifecycle: autoPause and autoResume at creation are the sandbox's
// lifecycle, which getInfo answers in E2B's names (kill, no auto-resume
// without them).
func TestLifecycle(t *testing.T) {
	u := newUnit(t, "")
	for _, tc := range []struct {
		body string
		want lifecycle
	}{
		{`{"templateID":"base","timeout":60}`, lifecycle{OnTimeout: "kill"}},
		{`{"templateID":"base","timeout":60,"autoPause":false}`, lifecycle{OnTimeout: "kill"}},
		{`{"templateID":"base","timeout":60,"autoPause":true}`, lifecycle{OnTimeout: "pause"}},
		{`{"templateID":"base","timeout":60,"autoPause":true,"autoPauseMemory":false}`, lifecycle{OnTimeout: "pause"}},
		{`{"templateID":"base","timeout":60,"autoPause":true,"autoResume":{"enabled":true}}`, lifecycle{OnTimeout: "pause", AutoResume: true}},
	} {
		c := u.create(keyA, tc.body)
		var d detail
		u.call(keyA, "GET", "/sandboxes/"+c.SandboxID, "", http.StatusOK, &d)
		if d.Lifecycle == nil || *d.Lifecycle != tc.want {
			t.Errorf("%s: lifecycle %+v, want %+v", tc.body, d.Lifecycle, tc.want)
		}
	}
}
