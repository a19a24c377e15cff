// Package router decides which isolation tier runs a sandbox's work (an
// execution, or a live sandbox, which has no code yet). A request may name
// its tier; with tier "auto" the router sends it to gVisor when it is
// marked untrusted, may run longer than a threshold, or its code has
// constructs its language's RiskScanner calls risky, and to the container
// tier otherwise. The scan is a hint for placing work, never a
// defence: both tiers enforce the full sandbox policy on whatever the scan
// misses.
package router

import (
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/sandbox"
)

// DefaultGVisorTimeout is the timeout above which auto picks gVisor: a
// long-running program has more time to probe the kernel, and gVisor's
// slower start matters less to it.
const DefaultGVisorTimeout = 30 * time.Second

// MaxScanBytes is how much code a scan reads. Larger code goes to gVisor
// unread, which bounds the scan's cost on the request path.
const MaxScanBytes = 256 << 10

// Config is the routing policy; the zero value is the default.
type Config struct {
	// GVisorTimeout sends auto executions whose timeout exceeds it to
	// gVisor. Zero means DefaultGVisorTimeout; negative turns the rule off.
	GVisorTimeout time.Duration
}

func (c Config) gvisorTimeout() time.Duration {
	if c.GVisorTimeout == 0 {
		return DefaultGVisorTimeout
	}
	return c.GVisorTimeout
}

// Decision is the tier an execution runs on and why, in words for the
// record ("auto: python uses subprocess (line 3)").
type Decision struct {
	Tier   runtime.Tier
	Reason string
}

// Request is what the router weighs: the tier asked for (auto, or a tier
// obeyed as asked) and, for auto, the work the sandbox is for: an
// execution's code, its timeout (filled in by then) and whether its caller
// marked it untrusted. A live sandbox asks with no code: it has none when
// it is made, and no timeout of an execution.
type Request struct {
	Tier      sandbox.Tier
	Code      string
	TimeoutMS int64
	Untrusted bool
}

// Route decides where req runs. runner is req's language and gvisor says
// whether this server has the gVisor tier, or will have it (its runtime is
// being installed: the caller then refuses work routed there as
// retryable, rather than run it on a weaker tier). An explicit tier
// is obeyed as asked (the caller refuses a tier it lacks); auto never
// picks a missing tier, and its reason says when it fell back.
func Route(cfg Config, req Request, runner lang.Runner, gvisor bool) Decision {
	switch req.Tier {
	case sandbox.TierGVisor:
		return Decision{Tier: runtime.TierGVisor, Reason: "requested"}
	case sandbox.TierContainer:
		return Decision{Tier: runtime.TierContainer, Reason: "requested"}
	}
	why, risky := assess(cfg, req, runner)
	switch {
	case !risky:
		return Decision{Tier: runtime.TierContainer, Reason: "auto: " + why}
	case !gvisor:
		return Decision{Tier: runtime.TierContainer, Reason: "auto: " + why + "; the gvisor tier is unavailable here, so container"}
	default:
		return Decision{Tier: runtime.TierGVisor, Reason: "auto: " + why}
	}
}

// assess says why auto should (risky) or need not pick gVisor, checking
// the cheap rules first.
func assess(cfg Config, req Request, runner lang.Runner) (why string, risky bool) {
	if req.Untrusted {
		return "untrusted", true
	}
	if limit := cfg.gvisorTimeout(); limit > 0 && time.Duration(req.TimeoutMS)*time.Millisecond > limit {
		return fmt.Sprintf("timeout_ms %d > %d", req.TimeoutMS, limit.Milliseconds()), true
	}
	sc, ok := runner.(lang.RiskScanner)
	if !ok {
		// Nobody has said what is risky in this language.
		return runner.Name() + " has no risk scan", true
	}
	if len(req.Code) > MaxScanBytes {
		return fmt.Sprintf("code is %d bytes, more than the %d a scan reads", len(req.Code), MaxScanBytes), true
	}
	risks := sc.Risks(req.Code)
	if len(risks) == 0 {
		return "no risky constructs", false
	}
	return runner.Name() + " uses " + describe(risks), true
}

// describe names the first few risks: "subprocess (line 3), socket (line
// 5) and 2 more".
func describe(risks []lang.Risk) string {
	const shown = 3
	var parts []string
	for _, r := range risks[:min(shown, len(risks))] {
		parts = append(parts, r.String())
	}
	s := strings.Join(parts, ", ")
	if n := len(risks) - shown; n > 0 {
		s += fmt.Sprintf(" and %d more", n)
	}
	return s
}
