package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is an httptest server standing in for Corral: the SDK's outside.
type fake struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*recorded
}

type recorded struct {
	method, path, query string
	header              http.Header
	body                ExecuteRequest
}

func newFake(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int)) *fake {
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorded{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone()}
		if r.Body != nil {
			raw, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(raw, &rec.body)
		}
		f.mu.Lock()
		f.requests = append(f.requests, rec)
		n := len(f.requests)
		f.mu.Unlock()
		h(w, r, n)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) all() []*recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*recorded(nil), f.requests...)
}

func (f *fake) client(retries int) *Client {
	c := NewClient(Config{Endpoint: f.URL + "/", APIKey: "k", MaxRetries: retries})
	c.backoff = time.Millisecond
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, field string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": "m", "field": field,
		"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}})
}

func exit(n int) *int { return &n }

func TestExecuteSuccess(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, Result{ExecutionID: "x", Status: StatusSuccess, Stdout: "4950\n", ExitCode: exit(0)})
	})
	res, err := f.client(0).Execute(t.Context(), ExecuteRequest{Language: "python", Code: "print(sum(range(100)))",
		Limits: Limits{TimeoutMS: 10000, MemoryMB: 256}})
	if err != nil || res.Stdout != "4950\n" {
		t.Fatalf("Execute: %+v, %v", res, err)
	}
	req := f.all()[0]
	if req.method != "POST" || req.path != "/v1/executions" || req.query != "wait=true" {
		t.Errorf("sent %s %s?%s", req.method, req.path, req.query)
	}
	if got := req.header.Get("Authorization"); got != "Bearer k" {
		t.Errorf("Authorization %q", got)
	}
	if !strings.HasPrefix(req.body.ExecutionID, "ex_") || req.body.Limits.MemoryMB != 256 || req.body.Language != "python" {
		t.Errorf("body %+v", req.body)
	}
}

func TestExecuteFailureIsError(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, Result{ExecutionID: "x", Status: StatusFailed, Stderr: "boom",
			Error: &Failure{Type: ErrOOM, Message: "out of memory"}})
	})
	res, err := f.client(0).Execute(t.Context(), ExecuteRequest{Language: "python"})
	var sbErr *Error
	if !errors.As(err, &sbErr) || sbErr.Type != ErrOOM || sbErr.Result == nil || sbErr.Result.Stderr != "boom" {
		t.Fatalf("err %v (%T)", err, err)
	}
	if res == nil || res != sbErr.Result {
		t.Errorf("result %+v not returned with the error", res)
	}
	var ae *APIError
	var te *TransportError
	if errors.As(err, &ae) || errors.As(err, &te) {
		t.Errorf("execution failure also matches API or transport errors")
	}
}

// The server answers 202 when its wait runs out; Execute keeps polling.
func TestExecuteKeepsWaitingAfter202(t *testing.T) {
	var gets atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Method == "POST" {
			writeJSON(w, 202, Submitted{ExecutionID: "ex_1", Status: StatusRunning})
			return
		}
		if gets.Add(1) < 3 {
			writeJSON(w, 200, Result{ExecutionID: "ex_1", Status: StatusRunning})
			return
		}
		writeJSON(w, 200, Result{ExecutionID: "ex_1", Status: StatusSuccess, Stdout: "late\n"})
	})
	res, err := f.client(0).Execute(t.Context(), ExecuteRequest{ExecutionID: "ex_1", Language: "bash"})
	if err != nil || res.Stdout != "late\n" {
		t.Fatalf("Execute: %+v, %v", res, err)
	}
	for _, r := range f.all()[1:] {
		if r.method != "GET" || r.path != "/v1/executions/ex_1" {
			t.Errorf("poll %s %s", r.method, r.path)
		}
	}
}

// A submit is retried with the same generated id after a 503, a dropped
// connection and a 429 with Retry-After.
func TestSubmitRetriesWithSameID(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch n {
		case 1:
			apiError(w, 503, "not_ready", "")
		case 2:
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			conn.Close()
		case 3:
			w.Header().Set("Retry-After", "0")
			apiError(w, 429, "queue_full", "")
		default:
			writeJSON(w, 202, Submitted{ExecutionID: "ignored-uses-body", Status: StatusQueued})
		}
	})
	id, err := f.client(3).Submit(t.Context(), ExecuteRequest{Language: "bash", Code: "true"})
	if err != nil || id == "" {
		t.Fatalf("Submit: %q, %v", id, err)
	}
	reqs := f.all()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	for _, r := range reqs {
		if r.body.ExecutionID != reqs[0].body.ExecutionID || r.body.ExecutionID == "" {
			t.Errorf("attempt with id %q, first %q", r.body.ExecutionID, reqs[0].body.ExecutionID)
		}
		if r.query != "" {
			t.Errorf("async submit sent query %q", r.query)
		}
	}
}

// A tier still being installed (503 tier_unavailable) is retried after
// its Retry-After; a call whose deadline comes sooner answers at once with
// the error, so the caller can decide.
func TestTierUnavailableIsRetried(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "0")
			apiError(w, 503, "tier_unavailable", "")
			return
		}
		writeJSON(w, 202, Submitted{ExecutionID: "x", Status: StatusQueued})
	})
	if _, err := f.client(2).Submit(t.Context(), ExecuteRequest{Language: "python", Isolation: IsolationGVisor}); err != nil {
		t.Fatalf("Submit after a tier_unavailable: %v", err)
	}
	if n := len(f.all()); n != 2 {
		t.Errorf("%d requests, want 2", n)
	}

	slow := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Retry-After", "30")
		apiError(w, 503, "tier_unavailable", "")
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := slow.client(3).Submit(ctx, ExecuteRequest{Language: "python", Isolation: IsolationGVisor})
	var ae *APIError
	if !errors.Is(err, ErrTierUnavailable) || !errors.As(err, &ae) || ae.RetryAfter != 30*time.Second {
		t.Fatalf("err = %v, want ErrTierUnavailable with Retry-After 30s", err)
	}
	if d := time.Since(start); d > time.Second || len(slow.all()) != 1 {
		t.Errorf("answered after %v and %d requests, want at once after 1", d, len(slow.all()))
	}
}

func TestNoRetriesByDefault(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) { apiError(w, 503, "not_ready", "") })
	_, err := f.client(0).GetExecution(t.Context(), "x")
	if !errors.Is(err, ErrServer) || len(f.all()) != 1 {
		t.Fatalf("err %v after %d requests", err, len(f.all()))
	}
}

func TestAPIErrors(t *testing.T) {
	cases := []struct {
		status   int
		code     string
		sentinel error
	}{
		{400, "invalid_request", ErrInvalidRequest},
		{401, "unauthorized", ErrUnauthorized},
		{404, "not_found", ErrNotFound},
		{409, "conflict", ErrConflict},
		{413, "payload_too_large", ErrPayloadTooLarge},
		{429, "queue_full", ErrQueueFull},
		{429, "tenant_quota", ErrRateLimited},
		{500, "internal", ErrServer},
		{503, "tier_unavailable", ErrTierUnavailable},
		{503, "image_pending", ErrImagePending},
	}
	for _, c := range cases {
		f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Retry-After", "0")
			apiError(w, c.status, c.code, "limits.memory_mb")
		})
		_, err := f.client(2).GetExecution(t.Context(), "x")
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != c.status || ae.Code != c.code || ae.Field != "limits.memory_mb" ||
			ae.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%d %s: %v", c.status, c.code, err)
			continue
		}
		if !errors.Is(err, c.sentinel) {
			t.Errorf("%d %s is not %v", c.status, c.code, c.sentinel)
		}
		for _, other := range []error{ErrInvalidRequest, ErrUnauthorized, ErrNotFound, ErrConflict, ErrQueueFull, ErrRateLimited, ErrServer, ErrTierUnavailable, ErrImagePending} {
			if other == ErrServer && c.status >= 500 {
				continue // every 5xx is also ErrServer
			}
			if other != c.sentinel && errors.Is(err, other) {
				t.Errorf("%d %s also matches %v", c.status, c.code, other)
			}
		}
		want := 1
		if ae.temporary() {
			want = 3
		}
		if got := len(f.all()); got != want {
			t.Errorf("%d %s: %d attempts, want %d", c.status, c.code, got, want)
		}
	}
}

func TestNonCorralErrorBody(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Error(w, "bad gateway from the proxy", http.StatusBadGateway)
	})
	_, err := f.client(0).GetExecution(t.Context(), "x")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Code != "http_502" || !strings.Contains(ae.Message, "proxy") || !errors.Is(err, ErrServer) {
		t.Fatalf("err %v", err)
	}
}

func TestTransportError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := NewClient(Config{Endpoint: "http://" + addr, MaxRetries: 1})
	c.backoff = time.Millisecond
	_, err = c.Submit(t.Context(), ExecuteRequest{ExecutionID: "ex_t", Language: "bash"})
	var te *TransportError
	var ae *APIError
	var se *Error
	if !errors.As(err, &te) || errors.As(err, &ae) || errors.As(err, &se) {
		t.Fatalf("err %v (%T)", err, err)
	}
	if te.ExecutionID != "ex_t" || !strings.Contains(err.Error(), "ex_t") {
		t.Errorf("transport error does not name the execution: %v", err)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Errorf("the network error is not wrapped: %v", err)
	}
}

func TestNotJSONIsTransportError(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(200)
		io.WriteString(w, "<html>")
	})
	_, err := f.client(0).GetExecution(t.Context(), "x")
	var te *TransportError
	if !errors.As(err, &te) {
		t.Fatalf("err %v (%T)", err, err)
	}
}

// Timeout bounds the whole call, polling included; the error names the
// execution so the caller can cancel it.
func TestTimeoutBoundsWholeCall(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.Method == "POST" {
			writeJSON(w, 202, Submitted{ExecutionID: "ex_slow", Status: StatusRunning})
			return
		}
		writeJSON(w, 200, Result{ExecutionID: "ex_slow", Status: StatusRunning})
	})
	c := NewClient(Config{Endpoint: f.URL, Timeout: 300 * time.Millisecond})
	_, err := c.Execute(t.Context(), ExecuteRequest{ExecutionID: "ex_slow", Language: "bash"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ex_slow") {
		t.Fatalf("err %v", err)
	}
	var te *TransportError
	if errors.As(err, &te) {
		t.Errorf("a deadline is reported as a transport error: %v", err)
	}
}

func TestMaxConcurrent(t *testing.T) {
	var cur, peak atomic.Int32
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		now := cur.Add(1)
		for {
			p := peak.Load()
			if now <= p || peak.CompareAndSwap(p, now) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		cur.Add(-1)
		writeJSON(w, 200, Result{Status: StatusSuccess})
	})
	c := NewClient(Config{Endpoint: f.URL, MaxConcurrent: 3})
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Execute(t.Context(), ExecuteRequest{Language: "bash"}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 3 || p < 1 {
		t.Errorf("peak concurrency %d, want 1..3", p)
	}
	// A caller whose context ends while waiting for a slot gives up.
	c.sem <- struct{}{}
	c.sem <- struct{}{}
	c.sem <- struct{}{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := c.Execute(ctx, ExecuteRequest{Language: "bash"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("blocked Execute: %v", err)
	}
}

func TestDefaultTransport(t *testing.T) {
	c := NewClient(Config{})
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok || tr.MaxIdleConnsPerHost != 20 {
		t.Fatalf("default transport %+v", c.hc.Transport)
	}
	if c.endpoint != DefaultEndpoint {
		t.Errorf("endpoint %q", c.endpoint)
	}
	own := &http.Client{}
	if NewClient(Config{HTTPClient: own}).hc != own {
		t.Error("HTTPClient not used")
	}
}

func TestRetryDelay(t *testing.T) {
	c := NewClient(Config{})
	if d := c.retryDelay(1, &APIError{Status: 429, RetryAfter: 3 * time.Second}); d != 3*time.Second {
		t.Errorf("Retry-After not honoured: %v", d)
	}
	for attempt := 1; attempt < 20; attempt++ {
		d := c.retryDelay(attempt, errors.New("x"))
		full := min(c.backoff<<min(attempt-1, 10), 5*time.Second)
		if d < full/2 || d >= full {
			t.Errorf("attempt %d: %v outside [%v, %v)", attempt, d, full/2, full)
		}
	}
	for _, c := range []struct {
		in   string
		want time.Duration
	}{{"", 0}, {"2", 2 * time.Second}, {"x", 0}, {time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0}} {
		if got := parseRetryAfter(c.in); got != c.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestCancelAndGet(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		writeJSON(w, 200, Result{ExecutionID: "a b", Status: StatusCancelled, Error: &Failure{Type: ErrCancelled}})
	})
	c := f.client(0)
	if err := c.Cancel(t.Context(), "a b"); err != nil {
		t.Fatal(err)
	}
	res, err := c.GetExecution(t.Context(), "a b")
	if err != nil || res.Status != StatusCancelled {
		t.Fatalf("get: %+v %v", res, err)
	}
	// Wait returns the failure like Execute.
	if _, err := c.Wait(t.Context(), "a b"); err == nil {
		t.Error("Wait on a cancelled execution returned no error")
	}
	reqs := f.all()
	if reqs[0].method != "POST" || reqs[0].path != "/v1/executions/a b/cancel" || reqs[1].path != "/v1/executions/a b" {
		t.Errorf("paths %s %s", reqs[0].path, reqs[1].path)
	}
}

func TestList(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		next := ""
		if r.URL.Query().Get("cursor") == "" {
			next = "c2"
		}
		writeJSON(w, 200, Page{Executions: []Result{{ExecutionID: fmt.Sprint(n)}}, NextCursor: next})
	})
	c := f.client(0)
	zero := 0
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p, err := c.List(t.Context(), ListOptions{SessionID: "s", Status: StatusFailed, ErrorType: ErrRuntime,
		Language: "python", ExitCodeNe: &zero, Sort: "-duration_ms", Limit: 10, Since: since})
	if err != nil || len(p.Executions) != 1 || p.NextCursor != "c2" {
		t.Fatalf("List: %+v %v", p, err)
	}
	want := "error_type=runtime_error&exit_code_ne=0&language=python&limit=10&session_id=s&since=2026-01-02T03%3A04%3A05Z&sort=-duration_ms&status=failed"
	if got := f.all()[0].query; got != want {
		t.Errorf("query\n got %s\nwant %s", got, want)
	}
	var ids []string
	for r, err := range c.ListAll(t.Context(), ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ExecutionID)
	}
	if strings.Join(ids, ",") != "2,3" {
		t.Errorf("ListAll ids %v", ids)
	}
}
