package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	payloads := [][]byte{nil, []byte("x"), bytes.Repeat([]byte("y"), MaxPayload)}
	for i, p := range payloads {
		if err := writeFrame(&buf, msgStdout, uint32(i), p); err != nil {
			t.Fatal(err)
		}
	}
	var scratch []byte
	for i, p := range payloads {
		var f frame
		var err error
		f, scratch, err = readFrame(&buf, scratch)
		if err != nil {
			t.Fatal(err)
		}
		if f.typ != msgStdout || f.id != uint32(i) || !bytes.Equal(f.payload, p) {
			t.Errorf("frame %d: type %d id %d len %d", i, f.typ, f.id, len(f.payload))
		}
	}
	if _, _, err := readFrame(&buf, nil); err != io.EOF {
		t.Errorf("after the last frame: %v", err)
	}
	if err := writeFrame(io.Discard, msgStdout, 0, make([]byte, MaxPayload+1)); !errors.Is(err, ErrProtocol) {
		t.Errorf("oversized write: %v", err)
	}
}

func TestOversizedFrameRefused(t *testing.T) {
	var hdr [headerSize]byte
	hdr[0] = msgStdout
	binary.BigEndian.PutUint32(hdr[5:], MaxPayload+1)
	if _, _, err := readFrame(bytes.NewReader(hdr[:]), nil); !errors.Is(err, ErrProtocol) {
		t.Errorf("oversized frame: %v", err)
	}
}

// hostileAgent builds a byte stream an agent might send.
func hostileAgent(frames ...func(*bytes.Buffer)) []byte {
	var b bytes.Buffer
	for _, f := range frames {
		f(&b)
	}
	return b.Bytes()
}

func put(typ byte, id uint32, payload string) func(*bytes.Buffer) {
	return func(b *bytes.Buffer) { _ = writeFrame(b, typ, id, []byte(payload)) }
}

// TestClientSurvivesHostileAgent feeds the client streams a compromised or
// broken agent could send: it must end with an error, never hang or panic.
func TestClientSurvivesHostileAgent(t *testing.T) {
	hello := fmt.Sprintf(`{"version":%d}`, Version)
	cases := map[string][]byte{
		"no hello":         hostileAgent(put(msgStdout, 1, "x")),
		"bad hello":        hostileAgent(put(msgHello, 0, "{")),
		"wrong version":    hostileAgent(put(msgHello, 0, `{"version":99}`)),
		"previous version": hostileAgent(put(msgHello, 0, fmt.Sprintf(`{"version":%d}`, Version-1))),
		"unknown type":     hostileAgent(put(msgHello, 0, hello), put(200, 1, "")),
		"bad exit":         hostileAgent(put(msgHello, 0, hello), put(msgExit, 1, "not json")),
		"truncated frame":  append(hostileAgent(put(msgHello, 0, hello)), 66, 0, 0, 0, 1, 0, 0, 0, 9, 'x'),
		"unknown ids":      hostileAgent(put(msgHello, 0, hello), put(msgStdout, 77, "x"), put(msgOK, 78, ""), put(msgExit, 79, "{}")),
		"bad stdin ack":    hostileAgent(put(msgHello, 0, hello), put(msgStdinAck, 1, `{"bytes":"many"}`)),
		"bad stdin end":    hostileAgent(put(msgHello, 0, hello), put(msgStdinEnd, 1, "{")),
		"stdin of no one":  hostileAgent(put(msgHello, 0, hello), put(msgStdinAck, 80, `{"bytes":-5}`), put(msgStdinEnd, 81, `{}`)),
	}
	for name, stream := range cases {
		t.Run(name, func(t *testing.T) {
			c := NewClient(bytes.NewReader(stream), io.Discard, nil)
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("client did not finish")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := c.Start(ctx, StartRequest{Argv: []string{"x"}}, nil); !errors.Is(err, ErrLost) {
				t.Errorf("Start after a broken stream: %v", err)
			}
		})
	}
}

func FuzzClientReadLoop(f *testing.F) {
	f.Add(hostileAgent(put(msgHello, 0, fmt.Sprintf(`{"version":%d}`, Version)), put(msgStdout, 1, "x")))
	f.Add(hostileAgent(put(msgHello, 0, fmt.Sprintf(`{"version":%d}`, Version)), put(msgError, 1, `{"kind":"ENOENT","message":"x"}`)))
	f.Add(hostileAgent(put(msgHello, 0, fmt.Sprintf(`{"version":%d}`, Version)), put(msgStdinAck, 1, `{"bytes":1099511627776}`)))
	f.Add([]byte{64, 0, 0, 0, 0, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, stream []byte) {
		c := NewClient(bytes.NewReader(stream), io.Discard, nil)
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("client did not finish")
		}
	})
}

// TestErrorKinds follows a failure from the agent's error to the host's
// errors.Is: the kind crosses the wire, the message is only carried.
func TestErrorKinds(t *testing.T) {
	inUse := &net.OpError{Op: "listen", Net: "tcp", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}
	cases := []struct {
		name string
		err  error
		kind Kind
		is   []error
		not  []error
	}{
		{"missing file", fmt.Errorf("open: %w", &fs.PathError{Op: "open", Path: "/workspace/x", Err: syscall.ENOENT}),
			"ENOENT", []error{syscall.ENOENT, fs.ErrNotExist, Kind("ENOENT")}, []error{syscall.ENOTDIR, KindInvalid}},
		{"not a directory", fmt.Errorf("list: %w", syscall.ENOTDIR), "ENOTDIR", []error{syscall.ENOTDIR}, []error{fs.ErrNotExist}},
		{"disk full", fmt.Errorf("write /workspace/x: %w", syscall.ENOSPC), "ENOSPC", []error{syscall.ENOSPC}, []error{syscall.EDQUOT}},
		{"port in use", fmt.Errorf("listen 127.0.0.1:3128: %w", inUse), "EADDRINUSE", []error{syscall.EADDRINUSE}, nil},
		{"permission", &fs.PathError{Op: "open", Path: "/workspace/x", Err: syscall.EACCES}, "EACCES", []error{syscall.EACCES, fs.ErrPermission}, nil},
		{"outside the roots", refuse(KindInvalid, "path %q is outside", "/etc/passwd"), KindInvalid, []error{KindInvalid}, []error{syscall.ENOENT, KindNotRegular}},
		{"agent kind wrapped", fmt.Errorf("reset: zygote 7: %w", refuse(KindZygote, "the zygote does not answer")), KindZygote, []error{KindZygote}, nil},
		{"agent kind over errno", fmt.Errorf("x: %w", refuse(KindSymlink, "a link")), KindSymlink, []error{KindSymlink}, []error{syscall.ELOOP}},
		{"no kind", errors.New("something else"), KindInternal, []error{KindInternal}, []error{syscall.ENOENT}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := kindOf(tc.err); got != tc.kind {
				t.Fatalf("kindOf = %q, want %q", got, tc.kind)
			}
			got := roundTrip(t, tc.err)
			var re *RemoteError
			if !errors.As(got, &re) || re.Kind != tc.kind || re.Message != tc.err.Error() {
				t.Fatalf("host got %#v, want kind %q and the agent's message", got, tc.kind)
			}
			for _, target := range tc.is {
				if !errors.Is(got, target) {
					t.Errorf("errors.Is(%v, %v) = false", got, target)
				}
			}
			for _, target := range tc.not {
				if errors.Is(got, target) {
					t.Errorf("errors.Is(%v, %v) = true", got, target)
				}
			}
		})
	}
}

// roundTrip has a fake agent answer the client's first request with err,
// the way the agent does, and returns what the client's call returned.
func roundTrip(t *testing.T, err error) error {
	t.Helper()
	b, _ := json.Marshal(errorReply{Kind: kindOf(err), Message: err.Error()})
	return answer(t, b)
}

// answer has a fake agent answer the client's first request with an
// error frame of payload.
func answer(t *testing.T, payload []byte) error {
	t.Helper()
	toHost, agentOut := io.Pipe()
	agentIn, fromHost := io.Pipe()
	c := NewClient(toHost, fromHost, nil)
	defer agentIn.Close()
	defer agentOut.Close()
	go func() {
		hello, _ := json.Marshal(Hello{Version: Version})
		if writeFrame(agentOut, msgHello, 0, hello) != nil {
			return
		}
		f, _, rerr := readFrame(agentIn, nil)
		if rerr != nil {
			return
		}
		_ = writeFrame(agentOut, msgError, f.id, payload)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Remove(ctx, "/workspace/x")
}

// TestErrorWithoutKind: an error frame without a kind, or with one the host
// does not know (a broken or hostile agent), is an internal error, never a
// kind the host acts on.
func TestErrorWithoutKind(t *testing.T) {
	for _, payload := range []string{`{"message":"open: no such file or directory"}`, `not json`, ``, `{"kind":"EWHATEVER"}`} {
		err := answer(t, []byte(payload))
		var re *RemoteError
		if !errors.As(err, &re) {
			t.Fatalf("%q: %v, want a *RemoteError", payload, err)
		}
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, KindInvalid) {
			t.Errorf("%q: %v matched a kind", payload, err)
		}
		if re.Kind != "EWHATEVER" && !errors.Is(err, KindInternal) {
			t.Errorf("%q: kind %q, want %q", payload, re.Kind, KindInternal)
		}
	}
}
