package main

import (
	"fmt"
	"os"

	"github.com/corralhq/corral/internal/config"
)

// cmdConfig checks a serve configuration without serving: `corral config
// check [serve flags]` loads it exactly as `corral serve` would (defaults,
// the file, CORRAL_* variables, flags; then Validate) and maps it as serve
// does (planServe), opening nothing: no store, state, blob store or
// runtime, so it needs neither root nor the backends, and refuses what
// serve would refuse before opening anything. A deployment runs it on the
// rendered configuration before rolling it out (the Helm chart's test
// does, with the image's binary).
func cmdConfig(args []string) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(os.Stderr, "usage: corral config check [--config FILE] [any corral serve flag]")
		return 2
	}
	cfg, err := config.Parse("config check", args[1:], os.LookupEnv, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral config:", err)
		return 1
	}
	// The mapping serve makes of it, which refuses what no component
	// can take (a state or blob URL of an unknown kind).
	p, err := planServe(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "corral config:", err)
		return 1
	}
	traces := "off"
	if p.Tracing.On() {
		traces = fmt.Sprintf("to %s (sample ratio %g)", p.Tracing.Endpoint, p.Tracing.SampleRatio)
	}
	fmt.Printf("ok: listen %s, store %s, state %s, blob %s, node %s, max_concurrency %d, queue_bound %d, %d tenant(s), traces %s\n",
		p.Listen, p.Store.Kind, p.State.Kind, p.Blob.Kind, p.Cluster.ID, p.Node.MaxConcurrency, p.Node.QueueBound, len(p.Tenants), traces)
	return 0
}
