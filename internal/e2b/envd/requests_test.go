package envd

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// A malformed request, as a test sends it.
type malformed struct {
	name string
	body []byte
	// hdr are more header name, value pairs.
	hdr []string
	// cut sends Content-Length: 100000 and closes after body.
	cut bool
}

// prefix is an envelope's prefix alone: flags and a length.
func prefix(flags byte, n uint32) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], n)
	return b
}

// bomb is n zero bytes, gzipped: a few KiB that inflate to n.
func bomb(t *testing.T, n int) []byte {
	t.Helper()
	var b bytes.Buffer
	z := gzip.NewWriter(&b)
	if _, err := z.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// streamCases are malformed stream requests; first is a well-formed first
// message of the procedure, which some of them start with.
func streamCases(t *testing.T, first string) []malformed {
	ok := envelope(0, []byte(first))
	return []malformed{
		{name: "a prefix shorter than 5 bytes", body: []byte{0, 0}},
		{name: "a length past the body", body: append(prefix(0, 100), `{}`...)},
		{name: "trailing bytes after the last envelope", body: append(bytes.Clone(ok), 0, 0, 0)},
		{name: "an unknown flag bit", body: envelope(0x80, []byte(first))},
		{name: "the end-of-stream flag from a client", body: envelope(0x02, []byte(`{}`))},
		{name: "the compressed flag without an encoding", body: envelope(1, []byte(first))},
		{name: "a length over the limit", body: prefix(0, maxMessage+1)},
		{name: "a message that inflates past the limit", body: envelope(1, bomb(t, maxMessage+1)),
			hdr: []string{"Connect-Content-Encoding", "gzip"}},
		{name: "a compressed message that is not gzip", body: envelope(1, []byte("not gzip")),
			hdr: []string{"Connect-Content-Encoding", "gzip"}},
		{name: "invalid JSON in a message", body: envelope(0, []byte(`{"path":`))},
		{name: "a message that is no JSON object", body: envelope(0, []byte("\xff\xfe"))},
		{name: "a body cut short in a prefix", body: []byte{0, 0, 0}, cut: true},
		{name: "a body cut short in a message", body: append(prefix(0, 100), `{"pa`...), cut: true},
	}
}

// unaryCases are malformed unary requests.
func unaryCases(t *testing.T) []malformed {
	return []malformed{
		{name: "invalid JSON", body: []byte(`{"path":`)},
		{name: "an envelope as the body", body: envelope(0, []byte(`{}`))},
		{name: "a body over the limit", body: append([]byte(`{"path":"`), bytes.Repeat([]byte("a"), maxMessage)...)},
		{name: "a body that inflates past the limit", body: bomb(t, maxMessage+1), hdr: []string{"Content-Encoding", "gzip"}},
		{name: "a body cut short", body: []byte(`{"pa`), cut: true},
	}
}

// send posts m to procedure with content type ct and returns the answer.
func send(t *testing.T, base, procedure, ct string, m malformed) (*http.Response, []byte) {
	t.Helper()
	if !m.cut {
		req, err := http.NewRequestWithContext(t.Context(), "POST", base+procedure, bytes.NewReader(m.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Connect-Protocol-Version", "1")
		for i := 0; i+1 < len(m.hdr); i += 2 {
			req.Header.Set(m.hdr[i], m.hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("%s: %v", m.name, err)
		}
		return res, b
	}
	// A body that ends early: Content-Length promises more than comes.
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: envd\r\nContent-Type: %s\r\nConnect-Protocol-Version: 1\r\nContent-Length: 100000\r\n\r\n%s",
		procedure, ct, m.body)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s: no answer: %v", m.name, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

// unaryAnswer checks a Connect unary error: status, and the JSON code.
func unaryAnswer(t *testing.T, what string, res *http.Response, body []byte, status int) {
	t.Helper()
	var e struct{ Code, Message string }
	if err := json.Unmarshal(body, &e); err != nil || res.StatusCode != status || e.Code != "invalid_argument" || e.Message == "" ||
		res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%s: %d %s %s; want %d and a JSON error invalid_argument", what, res.StatusCode, res.Header.Get("Content-Type"), body, status)
	}
}

// streamMessages are a Connect stream answer's messages (inflated when
// marked compressed) and its end-of-stream message.
func streamMessages(t *testing.T, body []byte) (msgs []string, end string, ok bool) {
	t.Helper()
	r := bytes.NewReader(body)
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return msgs, "", false
		}
		msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(r, msg); err != nil {
			return msgs, "", false
		}
		if hdr[0]&1 != 0 {
			z, err := gzip.NewReader(bytes.NewReader(msg))
			if err != nil {
				t.Fatalf("a compressed message: %v", err)
			}
			if msg, err = io.ReadAll(z); err != nil {
				t.Fatalf("a compressed message: %v", err)
			}
		}
		if hdr[0]&2 != 0 {
			return msgs, string(msg), r.Len() == 0
		}
		msgs = append(msgs, string(msg))
	}
}

// streamAnswer checks a Connect stream's refusal: HTTP 200, no message,
// an end-of-stream message with the error invalid_argument.
func streamAnswer(t *testing.T, what string, res *http.Response, body []byte) {
	t.Helper()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Errorf("%s: %d %s %q; want a stream's answer", what, res.StatusCode, res.Header.Get("Content-Type"), body)
		return
	}
	msgs, last, ok := streamMessages(t, body)
	var end struct {
		Error *struct{ Code, Message string } `json:"error"`
	}
	if !ok || len(msgs) != 0 || json.Unmarshal([]byte(last), &end) != nil || end.Error == nil ||
		end.Error.Code != "invalid_argument" || end.Error.Message == "" {
		t.Errorf("%s: messages %q, end %s; want only an end with the error invalid_argument", what, msgs, last)
	}
}

// TestMalformedEnvelopes: every malformed request to a procedure of each
// kind (unary, server stream, client stream) is answered invalid_argument
// as Connect has it: a unary call 400 and a JSON error, a stream an
// end-of-stream message with the error. No process starts, and the
// server goes on serving.
func TestMalformedEnvelopes(t *testing.T) {
	h := newHarness(t)
	streams := map[string]string{
		"/process.Process/Start":          `{"process":{"cmd":"/bin/true"}}`,
		"/process.Process/Connect":        `{"process":{"pid":1}}`,
		"/filesystem.Filesystem/WatchDir": `{"path":"/workspace"}`,
		"/process.Process/StreamInput":    `{"keepalive":{}}`,
	}
	for procedure, first := range streams {
		for _, m := range streamCases(t, first) {
			res, body := send(t, h.base, procedure, "application/connect+json", m)
			streamAnswer(t, procedure+": "+m.name, res, body)
		}
		// A server stream takes one message, no more, no less.
		if procedure != "/process.Process/StreamInput" {
			for _, m := range []malformed{
				{name: "no message"},
				{name: "two messages", body: append(envelope(0, []byte(first)), envelope(0, []byte(first))...)},
			} {
				res, body := send(t, h.base, procedure, "application/connect+json", m)
				streamAnswer(t, procedure+": "+m.name, res, body)
			}
		}
		// The unary Content-Type, or another method: refused with a
		// Connect error that says what to send.
		res, body := send(t, h.base, procedure, "application/json", malformed{name: "unary", body: []byte(first)})
		unaryAnswer(t, procedure+" as unary", res, body, http.StatusUnsupportedMediaType)
	}
	for _, procedure := range []string{"/filesystem.Filesystem/Stat", "/process.Process/SendInput"} {
		for _, m := range unaryCases(t) {
			res, body := send(t, h.base, procedure, "application/json", m)
			unaryAnswer(t, procedure+": "+m.name, res, body, http.StatusBadRequest)
		}
		res, body := send(t, h.base, procedure, "application/connect+json", malformed{name: "a stream", body: envelope(0, []byte(`{}`))})
		unaryAnswer(t, procedure+" as a stream", res, body, http.StatusUnsupportedMediaType)
		for _, ct := range []string{"application/grpc+json", "application/grpc-web+json", "text/plain", "application/json; charset=latin1"} {
			res, body := send(t, h.base, procedure, ct, malformed{name: ct, body: []byte(`{}`)})
			unaryAnswer(t, procedure+" as "+ct, res, body, http.StatusUnsupportedMediaType)
		}
		req, _ := http.NewRequestWithContext(t.Context(), "GET", h.base+procedure, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		unaryAnswer(t, "GET "+procedure, res, b, http.StatusMethodNotAllowed)
	}

	sb, err := h.m.Get("t", "box")
	if err != nil {
		t.Fatal(err)
	}
	if procs, err := sb.Processes(); err != nil || len(procs) != 0 {
		t.Errorf("processes after malformed requests: %d, %v", len(procs), err)
	}
	// Still serving, and what E2B's SDKs send still works: the JSON codec
	// with a charset, and gzip on a stream.
	if _, err := client[StatRequest, StatResponse](h.base, "/filesystem.Filesystem/Stat").CallUnary(t.Context(),
		connect.NewRequest(&StatRequest{Path: "/workspace"})); err != nil {
		t.Errorf("after the malformed requests: %v", err)
	}
	res, body := send(t, h.base, "/filesystem.Filesystem/Stat", "application/json; charset=utf-8",
		malformed{name: "charset", body: []byte(`{"path":"/workspace"}`)})
	if res.StatusCode != 200 || !strings.Contains(string(body), `"FILE_TYPE_DIRECTORY"`) {
		t.Errorf("JSON with a charset: %d %s", res.StatusCode, body)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo zipped"]},"stdin":false}`))
	zw.Close()
	res, body = send(t, h.base, "/process.Process/Start", "application/connect+json",
		malformed{name: "gzip", body: envelope(1, z.Bytes()), hdr: []string{"Connect-Content-Encoding", "gzip"}})
	msgs, end, _ := streamMessages(t, body)
	if res.StatusCode != 200 || end != "{}" || !strings.Contains(strings.Join(msgs, ""), `"exitCode":0`) {
		t.Errorf("a gzipped Start: %d %q, end %s", res.StatusCode, msgs, end)
	}
}
