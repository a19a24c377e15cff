package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// CutShort sends method target (a path and query) to the server at base
// with a body that declares 100000 bytes (Content-Length) but holds only
// sent ("hello" if empty), then half-closes the connection: a client gone
// mid-body. It returns the answer, or nil when the server closed the
// connection without one (a fine answer too); no answer within 20 s
// fails t. header are more header lines.
func CutShort(t testing.TB, base, method, target string, header http.Header, sent string) *http.Response {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var req strings.Builder
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n", method, target, u.Host)
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	if sent == "" {
		sent = "hello"
	}
	req.WriteString("\r\n" + sent)
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// Bounded: a server that hangs on such a body fails the caller's check.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		t.Fatalf("%s %s with a body cut short: no answer and the connection still open after 20 s", method, target)
	case err != nil:
		return nil
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	res.Body = io.NopCloser(strings.NewReader(string(body)))
	return res
}
