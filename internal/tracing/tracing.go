// Package tracing is Corral's OpenTelemetry set-up (docs/tracing.md): the
// official Go SDK exporting spans over OTLP/HTTP to the collector [tracing]
// names, sampled by ratio and respecting a caller's decision, with W3C
// trace context propagated in and out of HTTP calls; a slog handler that
// puts the trace and span ids on every log line written with a traced
// context; and the helpers the other packages open spans with. Off (no
// endpoint) it installs nothing: the global provider stays OpenTelemetry's
// no-op one, each span started costs a few nanoseconds and is never
// recorded.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope names the instrumentation in every span Corral makes.
const Scope = "github.com/corralhq/corral"

// Config is [tracing] once validated.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's URL (http or https); spans go
	// to its /v1/traces unless it names a path of its own. Empty: off.
	Endpoint string
	// SampleRatio is the share of traces begun here that are recorded
	// (0 to 1); a trace begun by a caller (traceparent) or another node
	// keeps the caller's decision.
	SampleRatio float64
	// ServiceName and NodeID are the resource's service.name and
	// service.instance.id; Version its service.version.
	ServiceName, NodeID, Version string
}

// On reports whether c exports anything.
func (c Config) On() bool { return c.Endpoint != "" }

// Check reports what is wrong with c, naming the settings as [tracing]'s.
func (c Config) Check() error {
	var errs []error
	if c.Endpoint != "" {
		if _, err := exportURL(c.Endpoint); err != nil {
			errs = append(errs, err)
		}
	}
	if !(c.SampleRatio >= 0 && c.SampleRatio <= 1) {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio %v: between 0 and 1", c.SampleRatio))
	}
	if c.On() && c.ServiceName == "" {
		errs = append(errs, errors.New("tracing.service_name is empty"))
	}
	return errors.Join(errs...)
}

// exportURL is where the exporter posts: endpoint's /v1/traces unless
// endpoint has a path.
func exportURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing.endpoint %q: an http or https URL such as http://otel-collector:4318", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Provider is tracing turned on: Setup installed it as OpenTelemetry's
// global provider and propagator. Shutdown flushes what is buffered.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Setup installs tracing as c says, globally (OpenTelemetry's API is
// global: every package's spans reach the one provider). Off, it installs
// nothing and returns a nil *Provider, whose Shutdown does nothing. Export
// errors are logged to log, as warnings.
func Setup(ctx context.Context, c Config, log *slog.Logger) (*Provider, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if !c.On() {
		return nil, nil
	}
	u, _ := exportURL(c.Endpoint)
	// The exporter also reads OTEL_EXPORTER_OTLP_HEADERS (a vendor's
	// key) and the other OTEL_EXPORTER_OTLP_* variables.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u))
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(c.ServiceName)}
	if c.NodeID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(c.NodeID))
	}
	if c.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(c.Version))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	on.Store(true)
	return &Provider{tp: tp}, nil
}

// Shutdown exports what is buffered and stops exporting; nil's does
// nothing.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}

// tracer is the global provider's, which delegates to the one Setup
// installs (OpenTelemetry's no-op one until then).
var tracer = otel.Tracer(Scope)

// on is set once Setup installed a provider: until then Start and
// StartServer make nothing at all, not even the no-op span's context.
var on atomic.Bool

// Start opens a span named name as a child of ctx's, or as a new trace's
// root, on the global provider (a no-op one when tracing is off).
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !on.Load() {
		return ctx, noSpan
	}
	return tracer.Start(ctx, name, opts...)
}

// StartChild is Start inside a recorded span only: work that is worth a
// span as part of a call but not as a trace of its own (a warm pool's
// sandbox made ahead of time) makes none outside one.
func StartChild(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return tracer.Start(ctx, name, opts...)
}

// noSpan is what Start returns when tracing is off: a span that records
// nothing and whose End does nothing.
var noSpan trace.Span = noop.Span{}

// End ends span, marking it failed with err's text if err is not nil.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceID is the id of ctx's trace, "" outside one (or with tracing off).
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}
