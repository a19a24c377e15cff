package badinput

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// patience is how long a case may take to be answered: past it, it hangs.
const patience = 10 * time.Second

// client never follows a redirect, so that one is seen as answered.
var client = &http.Client{
	Timeout:       patience,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// request is one call of a case. path holds the query, escaped as sent.
type request struct {
	method, path string
	header       http.Header
	body         []byte
	// cutShort sends a Content-Length of 100,000, the body's first bytes
	// (at most 5), and then closes the connection's writing half.
	cutShort bool
	// stream: the answer is a stream that may go on once its status came
	// (SSE, a Connect server stream); a 2xx is read no further unless
	// whole is set.
	whole bool
}

// answer is what a request got.
type answer struct {
	status int
	header http.Header
	body   []byte
	// closed: the server closed the connection without an answer (allowed
	// for a body cut short).
	closed bool
	// hung: no answer within patience.
	hung bool
	err  error
}

func (a answer) String() string {
	switch {
	case a.hung:
		return "no answer in " + patience.String()
	case a.closed:
		return "connection closed"
	case a.err != nil:
		return a.err.Error()
	}
	b := a.body
	if len(b) > 200 {
		b = append(b[:200:200], "..."...)
	}
	return fmt.Sprintf("%d %s", a.status, b)
}

// send makes r on the server at base.
func send(base string, r request) answer {
	if r.cutShort {
		return sendCut(base, r)
	}
	req, err := http.NewRequest(r.method, base+r.path, bytes.NewReader(r.body))
	if err != nil {
		return answer{err: err}
	}
	if r.body == nil {
		req.Body, req.ContentLength = nil, 0
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	res, err := client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return answer{hung: true}
		}
		return answer{err: err}
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, header: res.Header}
	if res.StatusCode < 300 && !r.whole {
		return a // a stream, or the answer to what was accepted
	}
	a.body, err = io.ReadAll(res.Body)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			a.hung = true
		} else {
			a.err = fmt.Errorf("%d, then reading the body: %w", res.StatusCode, err)
		}
	}
	return a
}

// sendCut sends r's head with a Content-Length far beyond what follows,
// a few bytes of the body, then closes the writing half and reads the
// answer.
func sendCut(base string, r request) answer {
	u, err := url.Parse(base)
	if err != nil {
		return answer{err: err}
	}
	c, err := net.DialTimeout("tcp", u.Host, patience)
	if err != nil {
		return answer{err: err}
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(patience))
	var head strings.Builder
	fmt.Fprintf(&head, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 100000\r\n", r.method, r.path, u.Host)
	for k, vs := range r.header {
		for _, v := range vs {
			fmt.Fprintf(&head, "%s: %s\r\n", k, v)
		}
	}
	head.WriteString("\r\n")
	part := r.body
	if len(part) > 5 {
		part = part[:5]
	}
	if _, err := c.Write(append([]byte(head.String()), part...)); err != nil {
		return answer{err: err}
	}
	c.(*net.TCPConn).CloseWrite()
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return answer{hung: true}
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed):
			return answer{closed: true}
		}
		var oe *net.OpError
		if errors.As(err, &oe) {
			return answer{closed: true} // reset
		}
		return answer{err: err}
	}
	defer res.Body.Close()
	a := answer{status: res.StatusCode, header: res.Header}
	a.body, _ = io.ReadAll(res.Body)
	return a
}

// retryAfter reports whether a has a Retry-After header of whole seconds.
func retryAfter(a answer) bool {
	n, err := strconv.Atoi(a.header.Get("Retry-After"))
	return err == nil && n > 0
}
