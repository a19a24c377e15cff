package agent

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// callNames name the spans of the calls the client traces, by frame type.
var callNames = map[byte]string{
	msgStart: "agent.start", msgSignal: "agent.signal", msgFileEnd: "agent.write_file", msgReset: "agent.reset",
	msgFileRead: "agent.read_file", msgList: "agent.list", msgRemove: "agent.remove", msgResize: "agent.resize",
	msgStat: "agent.stat", msgListDepth: "agent.list", msgMkdir: "agent.mkdir", msgMove: "agent.move",
}

// noSpan is the span of a call made outside a trace (an interface value
// made once: each call would allocate one).
var noSpan trace.Span = noop.Span{}

// traceCall opens the span of one call of typ to the agent, a child of
// ctx's span on that span's provider (the host's, internal/tracing), and
// only inside a recorded span: the agent's own binary links no SDK, and
// a call made outside any traced work (a warm pool's) makes no span.
func traceCall(ctx context.Context, typ byte) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, noSpan
	}
	return parent.TracerProvider().Tracer("github.com/corralhq/corral/internal/agent").Start(ctx, callNames[typ],
		trace.WithSpanKind(trace.SpanKindClient))
}

// endCall ends a call's span, failed if err is not nil.
func endCall(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
