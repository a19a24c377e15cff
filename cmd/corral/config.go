package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/corralhq/corral/internal/config"
)

// cmdConfig checks a serve configuration without serving: `corral config
// check [serve flags]` loads it exactly as `corral serve` would (defaults,
// the file, CORRAL_* variables, flags; then Validate) and opens nothing:
// no store, state, blob store or runtime, so it needs neither root nor the
// backends. A deployment runs it on the rendered configuration before
// rolling it out (the Helm chart's test does, with the image's binary).
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
	blob := "local"
	if strings.HasPrefix(cfg.Blob, "s3://") {
		blob = "s3"
	}
	fmt.Printf("ok: listen %s, store %s, state %s, blob %s, node %s, max_concurrency %d, queue_bound %d, %d tenant(s)\n",
		cfg.Listen, storeKind(cfg.Store), stateKind(cfg.State), blob, cfg.NodeID, cfg.MaxConcurrency, cfg.QueueBound, len(tenants(cfg)))
	return 0
}
