// Package metrics defines Corral's Prometheus metrics in one registry, so
// the /metrics endpoint and (later) the dashboard read the same numbers.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/corralhq/corral/sandbox"
)

// Metrics holds the collectors. The zero value is not usable; use New.
type Metrics struct {
	Registry *prometheus.Registry

	Executions    *prometheus.CounterVec   // language, status, error_type, tier
	Duration      *prometheus.HistogramVec // language, tier: program run time
	Latency       *prometheus.HistogramVec // language, tier: submit to final record
	QueueWait     prometheus.Histogram
	PeakMemory    *prometheus.HistogramVec // language
	InFlight      prometheus.Gauge
	Queued        prometheus.Gauge
	Rejected      *prometheus.CounterVec // reason: queue_full, invalid
	Deliveries    *prometheus.CounterVec // kind, outcome: delivered, retry
	Orphans       prometheus.Counter
	SweptSandbox  prometheus.Counter
	HTTPRequests  *prometheus.CounterVec // route, code
	CancelledRuns prometheus.Counter
	// AuditEvents counts audit events (internal/audit) by result: written
	// (stored), dropped (the queue stayed full, or the store refused
	// them), shipped and ship_failed (the JSON-lines sink).
	AuditEvents *prometheus.CounterVec

	// The warm pool (internal/pool), per tier and image.
	PoolIdle     *prometheus.GaugeVec     // tier, image: ready sandboxes
	PoolReset    *prometheus.GaugeVec     // tier, image: used sandboxes on their way back to idle
	PoolClaims   *prometheus.CounterVec   // tier, image, result: hit, miss
	PoolClaim    *prometheus.HistogramVec // tier: time to hand out a sandbox
	PoolReplaced *prometheus.CounterVec   // tier, image, reason: ready sandboxes a claim could not use
	PoolWait     *prometheus.HistogramVec // tier: claims' waits for their tenant's sandboxes to be reset
}

var latencyBuckets = []float64{0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 120, 300}

// New registers every collector on a fresh registry.
func New() *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.Registry.MustRegister(c) }
	m.Executions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_executions_total", Help: "Finished executions by language, status, error type and tier.",
	}, []string{"language", "status", "error_type", "tier"})
	m.Duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "corral_execution_duration_seconds", Help: "How long programs ran.", Buckets: latencyBuckets,
	}, []string{"language", "tier"})
	m.Latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "corral_execution_latency_seconds", Help: "From accepted request to final record.", Buckets: latencyBuckets,
	}, []string{"language", "tier"})
	m.QueueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "corral_queue_wait_seconds", Help: "Time executions waited in the queue.", Buckets: latencyBuckets,
	})
	m.PeakMemory = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "corral_execution_peak_memory_bytes", Help: "Peak memory of executions.",
		Buckets: prometheus.ExponentialBuckets(4<<20, 2, 12),
	}, []string{"language"})
	m.InFlight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "corral_executions_in_flight", Help: "Executions running on this node."})
	m.Queued = prometheus.NewGauge(prometheus.GaugeOpts{Name: "corral_queue_length", Help: "Executions waiting in the shared queue."})
	m.Rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_requests_rejected_total", Help: "Execution requests refused, by reason.",
	}, []string{"reason"})
	m.Deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_deliveries_total", Help: "Callback and memory-service delivery attempts by outcome.",
	}, []string{"kind", "outcome"})
	m.Orphans = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_orphans_total", Help: "Executions whose node stopped heartbeating, marked internal_error."})
	m.SweptSandbox = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_sandboxes_swept_total", Help: "Sandboxes the sweeper destroyed."})
	m.CancelledRuns = prometheus.NewCounter(prometheus.CounterOpts{Name: "corral_cancellations_total", Help: "Executions cancelled by clients."})
	m.AuditEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_audit_events_total", Help: "Audit events by result: written, dropped, shipped, ship_failed.",
	}, []string{"result"})
	m.HTTPRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_http_requests_total", Help: "API requests by route and status code.",
	}, []string{"route", "code"})
	m.PoolIdle = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "corral_pool_idle", Help: "Ready sandboxes in the warm pool.",
	}, []string{"tier", "image"})
	m.PoolReset = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "corral_pool_resetting", Help: "Used sandboxes being reset (or getting their zygote) before they are ready again.",
	}, []string{"tier", "image"})
	m.PoolClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_pool_claims_total", Help: "Sandbox claims on the warm pool, by result (hit: a ready sandbox; miss: a cold start).",
	}, []string{"tier", "image", "result"})
	m.PoolClaim = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "corral_pool_claim_seconds", Help: "Time to hand an execution a sandbox, ready or cold.",
		Buckets: []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5},
	}, []string{"tier"})
	m.PoolReplaced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_pool_replaced_total",
		Help: "Ready sandboxes a claim took but could not use, destroyed while the claim went on to another ready one or a cold start, by reason " +
			"(limit_below_usage: it holds more memory than the claim's limit leaves room for; error: it was dead, or could not be measured or updated).",
	}, []string{"tier", "image", "reason"})
	m.PoolWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "corral_pool_return_wait_seconds",
		Help:    "How long claims that found none of their tenant's sandboxes ready, while one was being reset, waited for it (only claims that waited).",
		Buckets: []float64{0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1},
	}, []string{"tier"})
	for _, c := range []prometheus.Collector{m.Executions, m.Duration, m.Latency, m.QueueWait, m.PeakMemory,
		m.InFlight, m.Queued, m.Rejected, m.Deliveries, m.Orphans, m.SweptSandbox, m.CancelledRuns, m.AuditEvents, m.HTTPRequests,
		m.PoolIdle, m.PoolReset, m.PoolClaims, m.PoolClaim, m.PoolReplaced, m.PoolWait,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return m
}

// Finished records a final execution.
func (m *Metrics) Finished(r *sandbox.Result) {
	et := ""
	if r.Error != nil {
		et = string(r.Error.Type)
	}
	m.Executions.WithLabelValues(r.Language, string(r.Status), et, r.Tier).Inc()
	if r.Status == sandbox.StatusCancelled {
		m.CancelledRuns.Inc()
	}
	if r.DurationMS > 0 {
		m.Duration.WithLabelValues(r.Language, r.Tier).Observe(float64(r.DurationMS) / 1000)
	}
	if !r.CreatedAt.IsZero() && !r.FinishedAt.IsZero() {
		m.Latency.WithLabelValues(r.Language, r.Tier).Observe(r.FinishedAt.Sub(r.CreatedAt).Seconds())
	}
	if r.PeakMemoryMB > 0 {
		m.PeakMemory.WithLabelValues(r.Language).Observe(float64(r.PeakMemoryMB << 20))
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}
