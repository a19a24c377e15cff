// Package bench measures Corral against baselines run side by side in the
// same process tree: bare interpreter spawns and hand-made OCI bundles.
// Results are reported as ratios to the baseline of the same run, never as
// absolute thresholds.
//
//	make bench     (go test -bench . ./bench)
package bench
