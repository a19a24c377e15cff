package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
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
	cases := map[string][]byte{
		"no hello":        hostileAgent(put(msgStdout, 1, "x")),
		"bad hello":       hostileAgent(put(msgHello, 0, "{")),
		"wrong version":   hostileAgent(put(msgHello, 0, `{"version":99}`)),
		"unknown type":    hostileAgent(put(msgHello, 0, `{"version":1}`), put(200, 1, "")),
		"bad exit":        hostileAgent(put(msgHello, 0, `{"version":1}`), put(msgExit, 1, "not json")),
		"truncated frame": append(hostileAgent(put(msgHello, 0, `{"version":1}`)), 66, 0, 0, 0, 1, 0, 0, 0, 9, 'x'),
		"unknown ids":     hostileAgent(put(msgHello, 0, `{"version":1}`), put(msgStdout, 77, "x"), put(msgOK, 78, ""), put(msgExit, 79, "{}")),
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
	f.Add(hostileAgent(put(msgHello, 0, `{"version":1}`), put(msgStdout, 1, "x")))
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
