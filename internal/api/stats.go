package api

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// StatsSource computes a tenant's overview; store.Store is one.
type StatsSource interface {
	ExecutionStats(ctx context.Context, tenant string, since, until time.Time) (*store.Stats, error)
}

// Bounds of GET /v1/stats?window=.
const (
	defaultStatsWindow = time.Hour
	minStatsWindow     = time.Minute
	maxStatsWindow     = 31 * 24 * time.Hour
)

// overview answers GET /v1/stats: the dashboard's overview of a tenant's
// executions created in the window, and this node's warm pool.
type overview struct {
	WindowSeconds int64     `json:"window_seconds"`
	Since         time.Time `json:"since"`
	Until         time.Time `json:"until"`
	// Executions were created in the window; Finished of them are final.
	Executions int64 `json:"executions"`
	Finished   int64 `json:"finished"`
	// QPS is Executions per second of the window.
	QPS float64 `json:"qps"`
	// SuccessRate is the share of Finished that succeeded; absent when
	// none finished.
	SuccessRate *float64                 `json:"success_rate,omitempty"`
	ByStatus    map[sandbox.Status]int64 `json:"by_status"`
	ErrorTypes  []errorShare             `json:"error_types"`
	Tiers       []tierShare              `json:"tiers"`
	DurationMS  percentiles              `json:"duration_ms"`
	LatencyMS   percentiles              `json:"latency_ms"`
	Pool        []poolEntry              `json:"pool"`
}

// errorShare and tierShare are a count and its share of the finished
// executions.
type errorShare struct {
	Type  sandbox.ErrorType `json:"type"`
	Count int64             `json:"count"`
	Share float64           `json:"share"`
}

type tierShare struct {
	Tier  string  `json:"tier"`
	Count int64   `json:"count"`
	Share float64 `json:"share"`
}

type percentiles struct {
	Count int64 `json:"count"`
	P50   int64 `json:"p50"`
	P95   int64 `json:"p95"`
	P99   int64 `json:"p99"`
	Max   int64 `json:"max"`
}

// poolEntry is the warm pool of one (tier, image) on this node, read from
// the Prometheus registry so that it is what /metrics says.
type poolEntry struct {
	Tier   string `json:"tier"`
	Image  string `json:"image"`
	Idle   int64  `json:"idle"`
	Hits   int64  `json:"hits"`
	Misses int64  `json:"misses"`
	// HitRate is Hits / (Hits + Misses); absent before the first claim.
	HitRate *float64 `json:"hit_rate,omitempty"`
}

// noTier names the executions that never reached a sandbox.
const noTier = "none"

func (s *Server) statsHandler(w http.ResponseWriter, r *http.Request, t *Tenant) {
	window := defaultStatsWindow
	if v := r.URL.Query().Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minStatsWindow || d > maxStatsWindow {
			writeError(w, refuse("window", "must be a duration from 1m to 744h, such as 15m, 1h or 24h"))
			return
		}
		window = d
	}
	if s.stats == nil {
		writeError(w, notFound("this server keeps no statistics"))
		return
	}
	// Microseconds, as the store keeps times: since and until are then
	// exactly the bounds a list query with the same since and until uses.
	until := time.Now().UTC().Truncate(time.Microsecond)
	since := until.Add(-window)
	st, err := s.stats.ExecutionStats(r.Context(), t.Name, since, until)
	if err != nil {
		writeError(w, asError(r.Context(), err, s.log))
		return
	}
	out := overview{WindowSeconds: int64(window / time.Second), Since: since, Until: until,
		Executions: st.Total, QPS: float64(st.Total) / window.Seconds(), ByStatus: st.ByStatus,
		DurationMS: percentiles(st.Duration), LatencyMS: percentiles(st.Latency),
		ErrorTypes: []errorShare{}, Tiers: []tierShare{}}
	for status, n := range st.ByStatus {
		if status.Final() {
			out.Finished += n
		}
	}
	if out.Finished > 0 {
		rate := float64(st.ByStatus[sandbox.StatusSuccess]) / float64(out.Finished)
		out.SuccessRate = &rate
		for typ, n := range st.ByErrorType {
			out.ErrorTypes = append(out.ErrorTypes, errorShare{Type: typ, Count: n, Share: float64(n) / float64(out.Finished)})
		}
		for tier, n := range st.ByTier {
			if tier == "" {
				tier = noTier
			}
			out.Tiers = append(out.Tiers, tierShare{Tier: tier, Count: n, Share: float64(n) / float64(out.Finished)})
		}
	}
	// Largest first; names break ties so the order is stable.
	slices.SortFunc(out.ErrorTypes, func(a, b errorShare) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Type, b.Type))
	})
	slices.SortFunc(out.Tiers, func(a, b tierShare) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Tier, b.Tier))
	})
	out.Pool = s.pool()
	writeJSON(w, http.StatusOK, out)
}

// pool reads corral_pool_idle and corral_pool_claims_total from the
// registry /metrics serves, by (tier, image). A registry that fails to
// gather still gives what it could; the overview shows that rather than
// nothing.
func (s *Server) pool() []poolEntry {
	families, err := s.metrics.Registry.Gather()
	if err != nil {
		s.log.Warn("gather metrics for the overview", "err", err)
	}
	type key struct{ tier, image string }
	byKey := map[key]*poolEntry{}
	entry := func(m *dto.Metric) *poolEntry {
		var k key
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "tier":
				k.tier = l.GetValue()
			case "image":
				k.image = l.GetValue()
			}
		}
		e := byKey[k]
		if e == nil {
			e = &poolEntry{Tier: k.tier, Image: k.image}
			byKey[k] = e
		}
		return e
	}
	for _, f := range families {
		switch f.GetName() {
		case "corral_pool_idle":
			for _, m := range f.GetMetric() {
				entry(m).Idle = int64(m.GetGauge().GetValue())
			}
		case "corral_pool_claims_total":
			for _, m := range f.GetMetric() {
				n := int64(m.GetCounter().GetValue())
				for _, l := range m.GetLabel() {
					if l.GetName() != "result" {
						continue
					}
					switch l.GetValue() {
					case "hit":
						entry(m).Hits += n
					case "miss":
						entry(m).Misses += n
					}
				}
			}
		}
	}
	out := make([]poolEntry, 0, len(byKey))
	for _, e := range byKey {
		if claims := e.Hits + e.Misses; claims > 0 {
			rate := float64(e.Hits) / float64(claims)
			e.HitRate = &rate
		}
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b poolEntry) int { return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Image, b.Image)) })
	return out
}
