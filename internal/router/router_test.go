package router

import (
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

// unscanned is a language nobody has written a RiskScanner for.
type unscanned struct{}

func (unscanned) Name() string               { return "cobol" }
func (unscanned) Plan(code string) lang.Plan { return lang.Plan{} }

func TestRoute(t *testing.T) {
	python, _ := lang.Get("python")
	bash, _ := lang.Get("bash")
	subprocess := "import json\n\nimport subprocess\nsubprocess.run(['id'])\n"
	cases := []struct {
		name   string
		cfg    Config
		req    Request
		runner lang.Runner
		noGV   bool // the server has no gVisor tier
		tier   runtime.Tier
		reason string
	}{
		{name: "gvisor requested", req: Request{Tier: sandbox.TierGVisor, Code: "print(1)"},
			tier: runtime.TierGVisor, reason: "requested"},
		{name: "gvisor requested but missing", req: Request{Tier: sandbox.TierGVisor}, noGV: true,
			tier: runtime.TierGVisor, reason: "requested"},
		{name: "container requested", req: Request{Tier: sandbox.TierContainer, Code: subprocess, Untrusted: true},
			tier: runtime.TierContainer, reason: "requested"},
		{name: "arithmetic", req: Request{Code: "print(sum(range(100)))"},
			tier: runtime.TierContainer, reason: "auto: no risky constructs"},
		{name: "subprocess", req: Request{Code: subprocess},
			tier: runtime.TierGVisor, reason: "auto: python uses subprocess (line 3)"},
		{name: "untrusted", req: Request{Code: "print(1)", Untrusted: true},
			tier: runtime.TierGVisor, reason: "auto: untrusted"},
		{name: "long timeout", req: Request{Code: "print(1)", TimeoutMS: 60000},
			tier: runtime.TierGVisor, reason: "auto: timeout_ms 60000 > 30000"},
		{name: "timeout at the threshold", req: Request{Code: "print(1)", TimeoutMS: 30000},
			tier: runtime.TierContainer, reason: "auto: no risky constructs"},
		{name: "own threshold", cfg: Config{GVisorTimeout: 10 * time.Second}, req: Request{Code: "print(1)", TimeoutMS: 15000},
			tier: runtime.TierGVisor, reason: "auto: timeout_ms 15000 > 10000"},
		{name: "threshold off", cfg: Config{GVisorTimeout: -1}, req: Request{Code: "print(1)", TimeoutMS: 900000},
			tier: runtime.TierContainer, reason: "auto: no risky constructs"},
		{name: "untrusted before timeout", req: Request{Code: subprocess, Untrusted: true, TimeoutMS: 60000},
			tier: runtime.TierGVisor, reason: "auto: untrusted"},
		{name: "many risks", runner: bash, req: Request{Code: "curl x &\nwget y\nnc z 1\neval w\n"},
			tier: runtime.TierGVisor, reason: "auto: bash uses background job (&) (line 1), curl (line 1), wget (line 2) and 2 more"},
		{name: "code too large to scan", req: Request{Code: strings.Repeat("#", MaxScanBytes+1)},
			tier: runtime.TierGVisor, reason: "auto: code is 262145 bytes, more than the 262144 a scan reads"},
		{name: "no scanner", runner: unscanned{}, req: Request{Code: "DISPLAY 'HI'."},
			tier: runtime.TierGVisor, reason: "auto: cobol has no risk scan"},
		{name: "fallback", noGV: true, req: Request{Code: subprocess},
			tier: runtime.TierContainer, reason: "auto: python uses subprocess (line 3); the gvisor tier is unavailable here, so container"},
		{name: "no fallback needed", noGV: true, req: Request{Code: "print(1)"},
			tier: runtime.TierContainer, reason: "auto: no risky constructs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runner := c.runner
			if runner == nil {
				runner = python
			}
			req := c.req
			if req.Tier == "" {
				req.Tier = sandbox.TierAuto
			}
			if req.TimeoutMS == 0 {
				req.TimeoutMS = 30000 // as normalised by the engine
			}
			got := Route(c.cfg, req, runner, !c.noGV)
			if got.Tier != c.tier || got.Reason != c.reason {
				t.Errorf("Route = %s %q, want %s %q", got.Tier, got.Reason, c.tier, c.reason)
			}
		})
	}
}
