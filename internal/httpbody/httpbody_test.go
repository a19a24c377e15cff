package httpbody

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/corralhq/corral/internal/fault"
)

// sendShort sends a request that declares a body of 100000 bytes, sends
// five and half-closes the connection: a client gone mid-body.
func sendShort(t *testing.T, url, headers string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\n%sContent-Length: 100000\r\n\r\nhello", headers)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.Copy(io.Discard, c)
}

// TestReaderCutShort: a body that ends before its Content-Length is
// ErrIncomplete, an invalid argument, wrapping what net/http said.
func TestReaderCutShort(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := Read(w, r, 1<<20)
		got <- err
	}))
	defer srv.Close()
	sendShort(t, srv.URL, "")
	err := <-got
	if !errors.Is(err, ErrIncomplete) || !errors.Is(err, io.ErrUnexpectedEOF) || fault.KindOf(err) != fault.InvalidArgument {
		t.Fatalf("a body cut short: %v (kind %v)", err, fault.KindOf(err))
	}
}

// TestReaderCap: a body at its cap is read whole; one byte more is
// payload_too_large, by Reader and by Limit alike.
func TestReaderCap(t *testing.T) {
	got := make(chan error, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := Read(w, r, 8)
		if err == nil && len(b) != 8 {
			err = fmt.Errorf("read %d bytes", len(b))
		}
		got <- err
	}))
	defer srv.Close()
	for _, body := range []string{"12345678", "123456789"} {
		res, err := http.Post(srv.URL, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	if err := <-got; err != nil {
		t.Errorf("8 bytes of 8: %v", err)
	}
	if err := <-got; !errors.Is(err, ErrTooLarge) || fault.Of(err).Code != "payload_too_large" {
		t.Errorf("9 bytes of 8: %v", err)
	}
	for _, c := range []struct {
		body string
		max  int64
		ok   bool
	}{{"", 0, true}, {"x", 0, false}, {"12345678", 8, true}, {"123456789", 8, false}, {strings.Repeat("x", 1<<20), -1, true}} {
		// One byte a read: the cap must hold across reads.
		b, err := io.ReadAll(Limit(iotest.OneByteReader(strings.NewReader(c.body)), c.max))
		switch {
		case c.ok && (err != nil || string(b) != c.body):
			t.Errorf("Limit(%d bytes, %d): %d bytes, %v", len(c.body), c.max, len(b), err)
		case !c.ok && (!errors.Is(err, ErrTooLarge) || int64(len(b)) != c.max):
			t.Errorf("Limit(%d bytes, %d): %d bytes, %v; want %d bytes and payload_too_large", len(c.body), c.max, len(b), err, c.max)
		}
	}
}

// TestLimitClassifies: what a reader over the body says (a corrupt gzip
// stream, a connection reset) is the client's; a fault a reader below
// made passes unchanged.
func TestLimitClassifies(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(strings.Repeat("corral ", 100)))
	_ = zw.Close()
	broken := gz.Bytes()[:gz.Len()-6] // no checksum
	zr, err := gzip.NewReader(bytes.NewReader(broken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(Limit(zr, -1)); !errors.Is(err, ErrIncomplete) {
		t.Errorf("a gzip stream cut short: %v", err)
	}
	reset := iotest.ErrReader(errors.New("connection reset by peer"))
	if _, err := io.ReadAll(Limit(reset, 10)); !errors.Is(err, ErrIncomplete) || fault.KindOf(err) != fault.InvalidArgument {
		t.Errorf("a reset: %v", err)
	}
	below := Limit(strings.NewReader("123456789"), 4)
	if _, err := io.ReadAll(Limit(below, 100)); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrIncomplete) {
		t.Errorf("a fault from below: %v", err)
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}
}
