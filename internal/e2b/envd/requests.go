package envd

import (
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/fault"
)

// What envd accepts of a Connect request before a handler sees its
// message. Every fault of a request's own bytes is invalid_argument: a
// body cut short or that failed to arrive; on a stream, an envelope
// prefix shorter than 5 bytes, a length past the body, trailing bytes
// after the last envelope, a flag bit other than "compressed", the
// compressed flag without an encoding named in Connect-Content-Encoding,
// no message or more than one where a server stream takes one; a message
// (once inflated) over maxMessage; a message that is not the JSON of its
// type. connect-go answers most of these internal (a server's fault, by
// Connect's mapping) and a message over its limit resource_exhausted,
// which E2B's SDKs read as a rate limit to retry; neither says the
// request is wrong. A stream's refusal is its end-of-stream message (HTTP
// 200), a unary call's a JSON error with HTTP 400, as Connect has them.
// Only the Connect protocol is spoken, with the JSON codec, as E2B's SDKs
// speak it: gRPC and gRPC-Web, a wrong Content-Type for the procedure or
// a method other than POST are answered 415 or 405, with a Connect JSON
// error saying what to send.

// guard is a Connect procedure's handler behind these checks; stream says
// its requests are enveloped (server and client streams).
type guard struct {
	h      http.Handler
	stream bool
}

// unary and streamed put a procedure's handler behind its guard.
func unary(h *connect.Handler) http.Handler    { return guard{h, false} }
func streamed(h *connect.Handler) http.Handler { return guard{h, true} }

func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	want := "application/json"
	if g.stream {
		want = "application/connect+json"
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeUnary(w, http.StatusMethodNotAllowed, "a Connect call is a POST")
		return
	}
	if !contentType(r.Header.Get("Content-Type"), g.stream) {
		w.Header().Set("Accept-Post", want)
		writeUnary(w, http.StatusUnsupportedMediaType,
			"this procedure is called with Content-Type "+want+" (the Connect protocol with the JSON codec)")
		return
	}
	if g.stream {
		r.Body = &frames{body: r.Body, encoded: encoded(r.Header.Get("Connect-Content-Encoding"))}
	} else {
		r.Body = &capped{body: r.Body}
	}
	g.h.ServeHTTP(w, r)
}

// contentType reports whether ct is the Connect protocol's for a unary
// call or a stream: JSON (with no parameter but charset=utf-8), or binary
// protobuf, which the codec "proto" then refuses by name (protoRefused).
func contentType(ct string, stream bool) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	prefix := "application/"
	if stream {
		prefix = "application/connect+"
	}
	switch mt {
	case prefix + "proto":
		return len(params) == 0
	case prefix + "json":
		for k, v := range params {
			if k != "charset" || !strings.EqualFold(v, "utf-8") {
				return false
			}
		}
		return true
	}
	return false
}

// encoded reports whether a stream's Connect-Content-Encoding names a
// compression (connect answers one it does not know unimplemented, as
// the protocol says).
func encoded(enc string) bool { return enc != "" && enc != "identity" }

// writeUnary answers a refusal before Connect's handler runs, as a Connect
// unary error (JSON, code invalid_argument) with status.
func writeUnary(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"code":"invalid_argument","message":%q}`, msg)
}

// invalid is the Connect error of a request's bytes that are wrong. A
// reader under connect-go returns it: connect passes a *connect.Error
// from its reader on as it is.
func invalid(format string, args ...any) *connect.Error {
	return classify(context.Background(), fault.Invalid("", format, args...), nil).connect()
}

// capped is a unary call's body: at most maxMessage bytes, whole.
type capped struct {
	body io.ReadCloser
	n    int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.n >= maxMessage {
		var one [1]byte
		k, err := c.body.Read(one[:])
		if k > 0 {
			return 0, invalid("the message is over %d bytes", maxMessage)
		}
		return 0, readErr(err)
	}
	p = p[:min(int64(len(p)), maxMessage-c.n)]
	k, err := c.body.Read(p)
	c.n += int64(k)
	return k, readErr(err)
}

func (c *capped) Close() error { return c.body.Close() }

// readErr is a body's read error as connect should see it: the end, or
// the request's fault.
func readErr(err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return invalid("the request body ended before it was whole")
}

// frames is a stream's body, checked envelope by envelope as connect reads
// it: each prefix is 5 bytes, its flags are 0 or "compressed" (with an
// encoding), its length at most maxMessage, and the body ends between
// envelopes. A prefix is checked before connect sees any of it.
type frames struct {
	body    io.ReadCloser
	encoded bool
	// prefix holds the current envelope's prefix: have bytes read of
	// it, sent of them passed on.
	prefix     [5]byte
	have, sent int
	// left counts the bytes of the current message still to pass on.
	left int64
	err  error
}

func (f *frames) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if f.sent < f.have { // a prefix checked, not all passed on
		k := copy(p, f.prefix[f.sent:f.have])
		f.sent += k
		return k, nil
	}
	if f.left > 0 {
		k, err := f.body.Read(p[:min(int64(len(p)), f.left)])
		f.left -= int64(k)
		switch {
		case err == io.EOF && f.left > 0:
			f.err = invalid("an envelope's length is past the end of the body: %d bytes of its message are missing", f.left)
		case err != nil && err != io.EOF:
			f.err = readErr(err)
		}
		if f.err != nil && k == 0 {
			return 0, f.err
		}
		return k, nil
	}
	// Between envelopes: the next prefix, whole, or the end.
	f.have, f.sent = 0, 0
	for f.have < len(f.prefix) {
		k, err := f.body.Read(f.prefix[f.have:])
		f.have += k
		if err == io.EOF && f.have == 0 {
			f.err = io.EOF
			return 0, io.EOF
		}
		if err == io.EOF {
			f.err = invalid("the body ends with %d bytes after its last envelope, too few for an envelope's 5-byte prefix", f.have)
			return 0, f.err
		}
		if err != nil {
			f.err = readErr(err)
			return 0, f.err
		}
	}
	flags, size := f.prefix[0], binary.BigEndian.Uint32(f.prefix[1:])
	switch {
	case flags&^1 != 0:
		f.err = invalid("an envelope has flags %#02x: a request's envelopes have 0, or 1 for a compressed message", flags)
	case flags == 1 && !f.encoded:
		f.err = invalid("an envelope is marked compressed but the request names no encoding (Connect-Content-Encoding)")
	case size > maxMessage:
		f.err = invalid("a message of %d bytes is over %d", size, maxMessage)
	}
	if f.err != nil {
		return 0, f.err
	}
	f.left = int64(size)
	return f.Read(p)
}

func (f *frames) Close() error { return f.body.Close() }

// gunzip is connect's gzip decompressor (Content-Encoding, or
// Connect-Content-Encoding on a stream), refusing a message that inflates
// past maxMessage as invalid_argument.
type gunzip struct {
	gzip.Reader
	n int64
}

func (g *gunzip) Read(p []byte) (int, error) {
	if g.n >= maxMessage {
		var one [1]byte
		if k, err := g.Reader.Read(one[:]); k == 0 {
			return 0, err
		}
		return 0, invalid("the message inflates to more than %d bytes", maxMessage)
	}
	k, err := g.Reader.Read(p[:min(int64(len(p)), maxMessage-g.n)])
	g.n += int64(k)
	return k, err
}

func (g *gunzip) Reset(r io.Reader) error {
	g.n = 0
	return g.Reader.Reset(r)
}

// compression is gzip as connect has it, with gunzip.
func compression() connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &gunzip{} },
		func() connect.Compressor { return gzip.NewWriter(io.Discard) })
}

// received is an interceptor that makes every error reading a stream's
// request invalid_argument (what is not a client leaving), and holds a
// server stream to one message.
type received struct{}

func (received) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (received) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (received) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &receiving{StreamingHandlerConn: conn, one: conn.Spec().StreamType == connect.StreamTypeServer})
	}
}

// receiving is a stream's conn under received.
type receiving struct {
	connect.StreamingHandlerConn
	one bool
	n   int
}

func (c *receiving) Receive(m any) error {
	err := c.StreamingHandlerConn.Receive(m)
	switch {
	case err == nil:
		c.n++
		if c.one && c.n > 1 {
			return invalid("the request has more than one message; this procedure takes one")
		}
		return nil
	case errors.Is(err, io.EOF):
		if c.one && c.n == 0 {
			return invalid("the request has no message; this procedure takes one")
		}
		return err
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodeCanceled, connect.CodeDeadlineExceeded:
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return invalid("%s", ce.Message())
	}
	return invalid("the request could not be read")
}
