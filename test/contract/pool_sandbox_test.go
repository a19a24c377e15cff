package contract

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/testenv"
)

// TestWarmPool runs python through a server with the embedded warm pool:
// executions are served by ready sandboxes (the hit counter moves), give
// the same answers as cold ones, and tenants do not share them.
func TestWarmPool(t *testing.T) {
	s := startServer(t, options{pool: true})
	hits := func() float64 {
		_, raw := s.call("", "GET", "/metrics", nil, nil)
		m := regexp.MustCompile(`corral_pool_claims_total\{image="host",result="hit",tier="container"\} (\S+)`).FindSubmatch(raw)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		return v
	}
	idle := func() bool {
		_, raw := s.call("", "GET", "/metrics", nil, nil)
		// The embedded pool's host-image classes, full: 2 ready for
		// executions and 1 for live sandboxes (docs/pool.md).
		return strings.Contains(string(raw), `corral_pool_idle{image="host",tier="container"} 3`)
	}
	// The sandbox an execution used is reset in the background after the
	// answer (it counts as resetting from before the answer is sent).
	reset := func() bool {
		_, raw := s.call("", "GET", "/metrics", nil, nil)
		return strings.Contains(string(raw), `corral_pool_resetting{image="host",tier="container"} 0`)
	}
	for deadline := time.Now().Add(60 * time.Second); !idle(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the embedded pool never held its 3 ready host sandboxes")
		}
	}
	before := hits()
	type rec struct {
		Status string `json:"status"`
		Stdout string `json:"stdout"`
		Tier   string `json:"tier"`
	}
	// The second line names the sandbox: its agent's start time.
	const code = "print(sum(range(100)))\nprint(open('/proc/1/stat').read().rsplit(')', 1)[1].split()[19])"
	sandboxes := map[string]string{}
	for i, key := range []string{alphaKey, alphaKey, betaKey, alphaKey} {
		var r rec
		code, raw := s.call(key, "POST", "/v1/executions?wait=true", map[string]any{
			"language": "python", "isolation": "container", "code": code}, &r)
		if code != 200 || r.Status != "success" || !strings.HasPrefix(r.Stdout, "4950\n") {
			t.Fatalf("execution %d: %d %s", i, code, raw)
		}
		sb := strings.TrimSpace(strings.TrimPrefix(r.Stdout, "4950\n"))
		if owner, ok := sandboxes[sb]; ok && owner != key {
			t.Fatalf("a sandbox served two tenants")
		}
		sandboxes[sb] = key
		if !testenv.Eventually(t, 30*time.Second, reset) {
			t.Fatalf("execution %d: its sandbox was still being reset after 30s", i)
		}
	}
	if got := hits() - before; got < 4 {
		t.Errorf("pool hits: %v, want 4", got)
	}
}
