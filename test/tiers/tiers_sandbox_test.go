// Package tiers runs a real corral serve whose gvisor tier is not there
// when it starts, as after `make run` while runsc is still being built:
// gVisor requests answer a retryable 503 (never another tier), and the tier
// serves once runsc is installed, without a restart.
package tiers

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/test/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// answer is one POST /v1/executions?wait=true.
type answer struct {
	status     int
	retryAfter string
	err        struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	}
	rec sandbox.Result
}

func execute(t *testing.T, srv *testserver.Server, req sandbox.ExecuteRequest) answer {
	t.Helper()
	body, _ := json.Marshal(req)
	hr, _ := http.NewRequest("POST", srv.URL+"/v1/executions?wait=true", bytes.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+testserver.AlphaKey)
	hr.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &a.rec); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
		return a
	}
	var e struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || e.Error == nil {
		t.Fatalf("%d answer %s is not an API error", resp.StatusCode, raw)
	}
	a.err.Code, a.err.Message, a.err.Field = e.Error.Code, e.Error.Message, e.Error.Field
	return a
}

var (
	// Asked for: gVisor or nothing.
	explicit = sandbox.ExecuteRequest{Language: "python", Isolation: sandbox.IsolationGVisor,
		Code: "import os; print(os.uname().release)"}
	// What auto sends to gVisor: risky code, untrusted, a long timeout.
	risky     = sandbox.ExecuteRequest{Language: "python", Code: "import subprocess\nprint(subprocess.run(['uname', '-r'], capture_output=True, text=True).stdout, end='')"}
	untrusted = sandbox.ExecuteRequest{Language: "bash", Code: "echo $(( 6 * 7 ))", Untrusted: true}
	long      = sandbox.ExecuteRequest{Language: "bash", Code: "echo $(( 6 * 7 ))", Limits: sandbox.Limits{TimeoutMS: 45000}}
	// What auto keeps on the container tier.
	plain = sandbox.ExecuteRequest{Language: "python", Code: "print(sum(range(100)))"}
)

// eventually retries req until check accepts its answer.
func eventually(t *testing.T, srv *testserver.Server, req sandbox.ExecuteRequest, what string, check func(answer) bool) answer {
	t.Helper()
	var a answer
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		if a = execute(t, srv, req); check(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %s; last answer %d %+v %s %q", what, a.status, a.err, a.rec.Tier, a.rec.TierReason)
		}
	}
}

func wantPending(t *testing.T, srv *testserver.Server, build *testserver.RunscBuild, req sandbox.ExecuteRequest, reason string) {
	t.Helper()
	a := execute(t, srv, req)
	if a.status != http.StatusServiceUnavailable || a.err.Code != "tier_unavailable" || a.retryAfter == "" {
		t.Fatalf("%q: %d %s (Retry-After %q) %s, want 503 tier_unavailable with Retry-After", reason, a.status, a.err.Code, a.retryAfter, a.rec.Tier)
	}
	msg := a.err.Message
	if !strings.Contains(msg, "gvisor tier ("+reason+")") || !strings.Contains(msg, "being installed") {
		t.Errorf("message %q does not say that gVisor is being installed and why it is needed", msg)
	}
	if strings.Contains(msg, build.Dir) || strings.Contains(msg, "runsc") {
		t.Errorf("message %q shows the host's build", msg)
	}
}

func wantTier(t *testing.T, a answer, tier, reason, stdout string) {
	t.Helper()
	if a.status != http.StatusOK || a.rec.Status != sandbox.StatusSuccess {
		t.Fatalf("%d %+v %s %+v", a.status, a.err, a.rec.Status, a.rec.Error)
	}
	if a.rec.Tier != tier || a.rec.TierReason != reason || !strings.Contains(a.rec.Stdout, stdout) {
		t.Errorf("ran on %s (%q) printing %q; want %s (%q) printing %q", a.rec.Tier, a.rec.TierReason, a.rec.Stdout, tier, reason, stdout)
	}
}

// TestGVisorArrivesWhileServing takes one server through a build of
// runsc that fails, then one that installs it.
func TestGVisorArrivesWhileServing(t *testing.T) {
	testenv.Runtime(t, "runsc") // what the build installs
	build := testserver.NewRunscBuild(t)
	build.Start()
	srv := testserver.Start(t, testserver.Options{Extra: build.Flags, Config: `
[pool]
warm = [
  {image = "host", tier = "container", language = "python", min_idle = 1, max_idle = 2, zygote = true},
  {image = "host", tier = "gvisor", language = "python", min_idle = 1, max_idle = 1, zygote = false},
]
`})
	if !strings.Contains(srv.Log(), build.Log) {
		t.Errorf("the server did not log where the build's log is (%s)", build.Log)
	}

	// Building: gVisor work waits, with nothing queued; the rest runs.
	wantPending(t, srv, build, explicit, "requested")
	wantPending(t, srv, build, risky, "auto: python uses subprocess (line 1)")
	wantPending(t, srv, build, untrusted, "auto: untrusted")
	wantPending(t, srv, build, long, "auto: timeout_ms 45000 > 30000")
	wantTier(t, execute(t, srv, plain), "container", "auto: no risky constructs", "4950\n")
	wantTier(t, execute(t, srv, sandbox.ExecuteRequest{Language: risky.Language, Code: risky.Code, Isolation: sandbox.IsolationContainer}),
		"container", "requested", "")
	var page struct {
		Executions []sandbox.Result `json:"executions"`
	}
	srv.Call(testserver.AlphaKey, "GET", "/v1/executions", nil, &page)
	if len(page.Executions) != 2 {
		t.Errorf("%d executions recorded, want the 2 that ran", len(page.Executions))
	}

	// The build fails: no gVisor after all, as on a server without it.
	build.Fail()
	a := eventually(t, srv, explicit, "refused as invalid after a failed build", func(a answer) bool { return a.status != http.StatusServiceUnavailable })
	if a.status != http.StatusBadRequest || a.err.Code != "invalid_request" || a.err.Field != "isolation" {
		t.Errorf("explicit gvisor after a failed build: %d %+v, want 400 on isolation", a.status, a.err)
	}
	wantTier(t, execute(t, srv, risky), "container",
		"auto: python uses subprocess (line 1); the gvisor tier is unavailable here, so container", "")

	// Another build: pending again, then installed.
	build.Start()
	eventually(t, srv, risky, "pending again", func(a answer) bool { return a.status == http.StatusServiceUnavailable })
	wantPending(t, srv, build, explicit, "requested")
	build.Install()
	a = eventually(t, srv, explicit, "served on gVisor", func(a answer) bool { return a.status != http.StatusServiceUnavailable })
	// runsc's kernel says so in its release.
	wantTier(t, a, "gvisor", "requested", "gvisor")
	wantTier(t, execute(t, srv, risky), "gvisor", "auto: python uses subprocess (line 1)", "gvisor")
	wantTier(t, execute(t, srv, untrusted), "gvisor", "auto: untrusted", "42\n")
	wantTier(t, execute(t, srv, plain), "container", "auto: no risky constructs", "4950\n")

	// The pool's gvisor class, left out at start, fills.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		_, metrics := srv.Call("", "GET", "/metrics", nil, nil)
		if idleOnGVisor(string(metrics)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gvisor pool class never filled")
		}
	}
}

// idleOnGVisor reports whether /metrics shows a ready pooled gvisor
// sandbox.
func idleOnGVisor(metrics string) bool {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "corral_pool_idle{") && strings.Contains(line, `tier="gvisor"`) && !strings.HasSuffix(line, " 0") {
			return true
		}
	}
	return false
}
