// Package bench is the warm-pool benchmark harness (docs/bench.md): a bare
// python3 spawn, bubblewrap, runc and runsc running a hand-made OCI
// bundle, and Corral through its HTTP API, cold and warm on both tiers,
// measured side by side in one process tree at concurrency 1, 8 and 32,
// with host memory per idle pooled sandbox; and live sandboxes (create
// from the pool, a cell in a code context, a fork, memory per idle one).
// Results are tables of ratios to the bare spawn of the same run, never
// absolute thresholds.
//
//	make bench     (go test -bench . -benchtime 80s ./bench)
package bench
