package badinput

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

// want is what a case must be answered with.
type want int

const (
	// refused: a 4xx with the wire's error body; for a body cut short the
	// server may close the connection instead.
	refused want = iota
	// bounded: 429 (the stdin bound: a process that does not read is a
	// retryable error, not a hang; on /v1 process_not_reading with
	// Retry-After, on Connect resource_exhausted).
	bounded
	// answered: any answer but a 5xx (the input is not malformed for this
	// field: a cell's code may be large; a route without input ignores a
	// body).
	answered
	// unknown: refused, or the 502 {"code": 502} E2B's own edge proxy
	// answers for a sandbox it does not know, which E2B's SDKs read as the
	// sandbox gone (internal/e2b/dispatch.go): a sandbox id no sandbox has.
	unknown
)

// wire is the error shape a family of routes answers with.
type wire int

const (
	v1Wire      wire = iota // {"error": {"code": "...", "message": "..."}}
	e2bWire                 // {"code": <the status>, "message": "..."}
	connectWire             // {"code": "invalid_argument", "message": "..."}
	streamWire              // a Connect stream: 200, envelopes, the last {"error": {"code"}}
)

// kase is one malformed call of a route.
type kase struct {
	name string
	req  request
	want want
	wire wire
}

// failure is a case answered otherwise than it must be.
type failure struct {
	route, kase, got string
}

// checkAnswer says what is wrong with a as the answer to c ("" if nothing).
func checkAnswer(c kase, a answer) string {
	switch {
	case a.hung:
		return "hang"
	case a.err != nil:
		return "transport error"
	case a.closed:
		if c.req.cutShort || c.want == answered {
			return ""
		}
		return "closed without an answer"
	}
	if c.want == bounded {
		switch {
		case a.status != http.StatusTooManyRequests:
			return fmt.Sprintf("status %d, not 429", a.status)
		case c.wire == v1Wire && !retryAfter(a):
			return "429 without Retry-After"
		}
		return errorShape(c.wire, a)
	}
	if a.status >= 500 {
		switch {
		case c.want == unknown && a.status == 502:
			return errorShape(e2bWire, a)
		}
		return "server error"
	}
	if c.wire == streamWire && a.status == 200 {
		code, err := streamEnd(a.body)
		switch {
		case err != nil:
			return err.Error()
		case code == "":
			if c.want == answered {
				return ""
			}
			return "accepted"
		case slices.Contains([]string{"internal", "unknown", "data_loss", "unavailable"}, code):
			return "server fault " + code
		}
		return ""
	}
	if a.status < 400 {
		if c.want == answered {
			return ""
		}
		return "accepted"
	}
	if c.req.method == "HEAD" {
		return "" // an answer without a body
	}
	return errorShape(c.wire, a)
}

// errorShape checks a's body is w's error.
func errorShape(w wire, a answer) string {
	switch w {
	case v1Wire:
		var e struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(a.body, &e) != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
			return "not /v1's error body"
		}
	case e2bWire:
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(a.body, &e) != nil || e.Code != a.status || e.Message == "" {
			return "not E2B's error body"
		}
	case connectWire, streamWire:
		var e struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(a.body, &e) != nil || e.Code == "" {
			return "not a Connect error body"
		}
		if slices.Contains([]string{"internal", "unknown", "data_loss"}, e.Code) {
			return "server fault " + e.Code
		}
	}
	return ""
}

// streamEnd reads a Connect stream's envelopes and returns its end's error
// code ("" for a stream that ended well).
func streamEnd(b []byte) (string, error) {
	for len(b) >= 5 {
		n := binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			break
		}
		flags, msg := b[0], b[5:5+n]
		b = b[5+n:]
		if flags&2 == 0 {
			continue
		}
		var e struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(msg, &e); err != nil {
			return "", fmt.Errorf("a stream end that is not JSON: %q", msg)
		}
		if e.Error == nil {
			return "", nil
		}
		return e.Error.Code, nil
	}
	return "", fmt.Errorf("a stream without its end")
}

// verbose (BADINPUT_VERBOSE=1) prints every case's answer.
var verbose = os.Getenv("BADINPUT_VERBOSE") == "1"

// sweep runs cases concurrently (a few at a time: a hang costs patience)
// and returns what failed.
func sweep(base string, route string, cases []kase) []failure {
	var (
		mu  sync.Mutex
		out []failure
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, 6)
	for _, c := range cases {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			a := send(base, c.req)
			if verbose {
				fmt.Printf("%s | %s | %s\n", route, c.name, strings.ReplaceAll(a.String(), "\n", " "))
			}
			if why := checkAnswer(c, a); why != "" {
				mu.Lock()
				out = append(out, failure{route, c.name, why + ": " + a.String()})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// report fails t with every failure, one line each, sorted.
func report(t *testing.T, fails []failure) {
	t.Helper()
	sort.Slice(fails, func(i, j int) bool {
		if fails[i].route != fails[j].route {
			return fails[i].route < fails[j].route
		}
		return fails[i].kase < fails[j].kase
	})
	for _, f := range fails {
		t.Errorf("%s | %s | %s", f.route, f.kase, strings.ReplaceAll(f.got, "\n", " "))
	}
}
