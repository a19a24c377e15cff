package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// StartServer opens the server span of a request to route (its mux
// pattern), continuing the trace its traceparent header names (a client's,
// or the node's that forwarded it); the request returned carries the span.
func StartServer(r *http.Request, route string) (*http.Request, trace.Span) {
	if !on.Load() {
		return r, noSpan
	}
	ctx := otel.GetTextMapPropagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRoute(route),
			semconv.URLPath(r.URL.Path))
	}
	return r.WithContext(ctx), span
}

// EndServer ends a server span with the status answered: a 5xx marks it
// failed (a 4xx is the caller's, not the server's).
func EndServer(span trace.Span, status int) {
	Status(span, status)
	span.End()
}

// Status records the status an HTTP call was answered with on span: a
// 5xx marks it failed.
func Status(span trace.Span, status int) {
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
}

// Inject writes ctx's trace context into h (traceparent), for the server
// that h's request goes to to continue the trace. Off, it writes nothing.
func Inject(ctx context.Context, h http.Header) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
}
