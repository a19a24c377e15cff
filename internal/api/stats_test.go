package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/sandbox"
)

// TestStats: the overview counts the tenant's executions of the window
// by status, error type and tier, and shows this node's warm pool as
// /metrics does.
func TestStats(t *testing.T) {
	s := newStack(t)
	for _, code := range []string{"true", "true", "true", "exit 1"} {
		s.call(keyAlpha, "POST", "/v1/executions?wait=true", jsonOf(t, bash(code)), http.StatusOK, nil)
	}
	s.call(keyBeta, "POST", "/v1/executions?wait=true", jsonOf(t, bash("true")), http.StatusOK, nil)
	s.metrics.PoolIdle.WithLabelValues("container", "python").Set(2)
	s.metrics.PoolClaims.WithLabelValues("container", "python", "hit").Add(3)
	s.metrics.PoolClaims.WithLabelValues("container", "python", "miss").Add(1)
	s.metrics.PoolClaims.WithLabelValues("gvisor", "host", "miss").Add(2)

	var o overview
	s.call(keyAlpha, "GET", "/v1/stats?window=15m", "", http.StatusOK, &o)
	if o.WindowSeconds != 900 || o.Executions != 4 || o.Finished != 4 || o.SuccessRate == nil || *o.SuccessRate != 0.75 {
		t.Errorf("overview %+v", o)
	}
	if o.ByStatus[sandbox.StatusSuccess] != 3 || o.ByStatus[sandbox.StatusFailed] != 1 {
		t.Errorf("by status %v", o.ByStatus)
	}
	if len(o.ErrorTypes) != 1 || o.ErrorTypes[0].Type != sandbox.ErrRuntime || o.ErrorTypes[0].Count != 1 {
		t.Errorf("error types %+v", o.ErrorTypes)
	}
	if len(o.Tiers) != 1 || o.Tiers[0].Tier != "container" || o.Tiers[0].Share != 1 {
		t.Errorf("tiers %+v", o.Tiers)
	}
	if o.DurationMS.Count != 4 || o.Since.Add(15*time.Minute) != o.Until {
		t.Errorf("durations %+v, window %s to %s", o.DurationMS, o.Since, o.Until)
	}
	rate := 0.75
	want := []poolEntry{
		{Tier: "container", Image: "python", Idle: 2, Hits: 3, Misses: 1, HitRate: &rate},
		{Tier: "gvisor", Image: "host", Misses: 2, HitRate: new(float64)},
	}
	if diff := cmp.Diff(want, o.Pool); diff != "" {
		t.Errorf("pool (-want +got):\n%s", diff)
	}
	var b overview
	s.call(keyBeta, "GET", "/v1/stats", "", http.StatusOK, &b)
	if b.WindowSeconds != 3600 || b.Executions != 1 {
		t.Errorf("beta's overview %+v", b)
	}
	for _, w := range []string{"30s", "745h", "soon"} {
		e, _ := s.fail(keyAlpha, "GET", "/v1/stats?window="+w, "", http.StatusBadRequest, "invalid_request")
		if e.Field != "window" {
			t.Errorf("window=%s names %q", w, e.Field)
		}
	}
	off := newStack(t, func(o *options) { o.idle = true; o.noStats = true })
	off.fail(keyAlpha, "GET", "/v1/stats", "", http.StatusNotFound, "not_found")
}
