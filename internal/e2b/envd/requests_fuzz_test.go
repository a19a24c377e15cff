package envd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"connectrpc.com/connect"
)

// wellFramed is what frames accepts, said plainly: whole envelopes to the
// end, each with flags 0 (or 1 when encoded) and a length within
// maxMessage.
func wellFramed(b []byte, encoded bool) bool {
	for len(b) > 0 {
		if len(b) < 5 {
			return false
		}
		flags, n := b[0], binary.BigEndian.Uint32(b[1:5])
		if flags > 1 || (flags == 1 && !encoded) || n > maxMessage || uint64(len(b)-5) < uint64(n) {
			return false
		}
		b = b[5+n:]
	}
	return true
}

// FuzzFrames: a stream's body read through frames, a byte at a time or in
// larger reads, passes on the body's bytes unchanged, and ends at the
// body's end when it is well framed, else with an invalid_argument error.
func FuzzFrames(f *testing.F) {
	for _, seed := range [][]byte{
		{}, {0, 0}, envelope(0, []byte(`{}`)), envelope(1, []byte("x")), envelope(0x80, nil), envelope(2, []byte("{}")),
		append(envelope(0, []byte(`{"path":"/"}`)), envelope(0, nil)...), append(envelope(0, nil), 0, 0, 0),
		{0, 0, 0x80, 0, 1}, {0, 0xff, 0xff, 0xff, 0xff},
	} {
		f.Add(seed, false, false)
		f.Add(seed, true, true)
	}
	f.Fuzz(func(t *testing.T, body []byte, encoded, oneByte bool) {
		var r io.Reader = &frames{body: io.NopCloser(bytes.NewReader(body)), encoded: encoded}
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		got, err := io.ReadAll(r)
		if !bytes.HasPrefix(body, got) {
			t.Fatalf("frames passed on %q of %q", got, body)
		}
		var ce *connect.Error
		switch ok := wellFramed(body, encoded); {
		case ok && (err != nil || len(got) != len(body)):
			t.Fatalf("a well-framed body %q: %q passed on, %v", body, got, err)
		case !ok && (!errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument):
			t.Fatalf("a body framed wrong %q (encoded %v): %v, want invalid_argument", body, encoded, err)
		}
	})
}
