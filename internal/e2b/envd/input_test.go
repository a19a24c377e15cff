package envd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/engine"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// startProc starts cmd with its stdin open and returns its pid.
func (h *harness) startProc(ctx context.Context, cmd string) Uint32 {
	h.t.Helper()
	st, err := client[StartRequest, StartResponse](h.base, "/process.Process/Start").CallServerStream(ctx,
		connect.NewRequest(&StartRequest{Process: shell(cmd), Stdin: ptr(true)}))
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() || st.Msg().Event.Start == nil {
		h.t.Fatalf("no start event: %v", st.Err())
	}
	return st.Msg().Event.Start.PID
}

// output waits for process pid to end and returns its stdout.
func (h *harness) output(ctx context.Context, pid Uint32) string {
	h.t.Helper()
	st, err := client[ConnectRequest, ConnectResponse](h.base, "/process.Process/Connect").CallServerStream(ctx,
		connect.NewRequest(&ConnectRequest{Process: &ProcessSelector{PID: &pid}}))
	if err != nil {
		h.t.Fatal(err)
	}
	defer st.Close()
	ev := collect(h.t, false, st.Receive, func() *ProcessEvent { return st.Msg().Event }, st.Err)
	if ev.end == nil || ev.end.ExitCode != 0 {
		h.t.Fatalf("process %d ended %+v (stderr %q)", pid, ev.end, ev.stderr)
	}
	return ev.stdout
}

func (h *harness) closeStdin(ctx context.Context, pid Uint32) {
	h.t.Helper()
	if _, err := client[CloseStdinRequest, CloseStdinResponse](h.base, "/process.Process/CloseStdin").CallUnary(ctx,
		connect.NewRequest(&CloseStdinRequest{Process: &ProcessSelector{PID: &pid}})); err != nil {
		h.t.Fatal(err)
	}
}

func startMsg(pid Uint32) *StreamInputRequest {
	m := &StreamInputRequest{}
	m.Start = &struct {
		Process *ProcessSelector `json:"process,omitempty"`
	}{&ProcessSelector{PID: &pid}}
	return m
}

func dataMsg(b []byte) *StreamInputRequest {
	m := &StreamInputRequest{}
	m.Data = &struct {
		Input *ProcessInput `json:"input,omitempty"`
	}{&ProcessInput{Stdin: ptr(Bytes(b))}}
	return m
}

// streamInput sends msgs as one StreamInput call and returns its answer.
func (h *harness) streamInput(ctx context.Context, msgs ...*StreamInputRequest) error {
	h.t.Helper()
	st := client[StreamInputRequest, StreamInputResponse](h.base, "/process.Process/StreamInput").CallClientStream(ctx)
	for _, m := range msgs {
		if st.Send(m) != nil {
			break // the server answered already; CloseAndReceive says what
		}
	}
	_, err := st.CloseAndReceive()
	return err
}

// TestStreamInput: a client stream of input: a start naming the process,
// then data and keep-alives, in order; a stream without its start first,
// or with two, is refused.
func TestStreamInput(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	pid := h.startProc(ctx, "cat")
	if err := h.streamInput(ctx, startMsg(pid), dataMsg([]byte("hello ")), &StreamInputRequest{Keepalive: &KeepAlive{}},
		dataMsg([]byte("world\n"))); err != nil {
		t.Fatal(err)
	}
	if err := h.streamInput(ctx, startMsg(pid), dataMsg([]byte("again\n"))); err != nil {
		t.Fatal(err)
	}
	noInput := dataMsg(nil)
	noInput.Data.Input = nil
	noSelector := startMsg(pid)
	noSelector.Start.Process = nil
	for name, msgs := range map[string][]*StreamInputRequest{
		"data first":  {dataMsg([]byte("x"))},
		"two starts":  {startMsg(pid), startMsg(pid)},
		"no input":    {startMsg(pid), noInput},
		"no kind":     {startMsg(pid), {}},
		"no selector": {noSelector, dataMsg([]byte("x"))},
	} {
		if err := h.streamInput(ctx, msgs...); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: %v, want invalid_argument", name, err)
		}
	}
	if err := h.streamInput(ctx); err != nil {
		t.Errorf("an empty stream: %v, want no error (nothing to write)", err)
	}
	missing := Uint32(999999)
	if err := h.streamInput(ctx, startMsg(missing), dataMsg([]byte("x"))); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("an unknown process: %v, want not_found", err)
	}
	h.closeStdin(ctx, pid)
	if got := h.output(ctx, pid); got != "hello world\nagain\n" {
		t.Errorf("cat read %q", got)
	}
}

// TestInputNotReading: 4 MiB of input, by SendInput or StreamInput, to a
// process that does not read its stdin ends after the stall bound with
// resource_exhausted (E2B's SDKs: a RateLimitError, "try again later"),
// saying how many of the input's first bytes were accepted; the process,
// once it reads, gets exactly those.
func TestInputNotReading(t *testing.T) {
	f := testenv.FakeEngine(t, func(c *engine.Config) { c.CacheDir = "" })
	lc := live.DefaultConfig()
	lc.StdinStall = 300 * time.Millisecond
	h := harnessOn(t, f.Engine, f.Fleet, sandbox.IsolationContainer, lc)
	ctx := t.Context()
	for _, how := range []string{"SendInput", "StreamInput"} {
		t.Run(how, func(t *testing.T) {
			pid := h.startProc(ctx, "while [ ! -e go-"+how+" ]; do sleep 0.05; done; exec sha256sum")
			data := make([]byte, 4<<20)
			rand.Read(data)
			var err error
			if how == "SendInput" {
				_, err = client[SendInputRequest, SendInputResponse](h.base, "/process.Process/SendInput").CallUnary(ctx,
					connect.NewRequest(&SendInputRequest{Process: &ProcessSelector{PID: &pid}, Input: &ProcessInput{Stdin: ptr(Bytes(data))}}))
			} else {
				msgs := []*StreamInputRequest{startMsg(pid)}
				for i := 0; i < len(data); i += 1 << 20 {
					msgs = append(msgs, dataMsg(data[i:i+1<<20]))
				}
				err = h.streamInput(ctx, msgs...)
			}
			var n int
			var ce *connect.Error
			if connect.CodeOf(err) != connect.CodeResourceExhausted || !errors.As(err, &ce) {
				t.Fatalf("4 MiB to a process that does not read: %v; want resource_exhausted", err)
			}
			msg := ce.Message()
			if i := strings.Index(msg, "the first "); i < 0 {
				t.Fatalf("%q says nothing of what was accepted", msg)
			} else if _, err := fmt.Sscanf(msg[i:], "the first %d bytes", &n); err != nil || n < agent.StdinWindow || n >= len(data) {
				t.Fatalf("%q: %d bytes accepted (%v); want a window or more, not all", msg, n, err)
			}
			if _, err := client[SendInputRequest, SendInputResponse](h.base, "/process.Process/SendInput").CallUnary(ctx,
				connect.NewRequest(&SendInputRequest{Process: &ProcessSelector{PID: &pid}, Input: &ProcessInput{Stdin: ptr(Bytes("more"))}})); connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Errorf("a second input: %v, want resource_exhausted", err)
			}
			if _, err := client[MakeDirRequest, MakeDirResponse](h.base, "/filesystem.Filesystem/MakeDir").CallUnary(ctx,
				connect.NewRequest(&MakeDirRequest{Path: "go-" + how})); err != nil {
				t.Fatal(err)
			}
			h.closeStdin(ctx, pid)
			sum := sha256.Sum256(data[:n])
			if got, want := h.output(ctx, pid), hex.EncodeToString(sum[:])+"  -\n"; got != want {
				t.Errorf("the process read %q, want the sum of the first %d bytes, %q", got, n, want)
			}
		})
	}
}
