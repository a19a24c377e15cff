package sandbox

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultEndpoint is where a Client connects when Config.Endpoint is empty:
// a corral serve started with its defaults on this machine.
const DefaultEndpoint = "http://127.0.0.1:8080"

// Version is the SDK's version, sent in the User-Agent header.
const Version = "0.1.0"

// Config configures a Client. The zero value talks to DefaultEndpoint
// without a key and never retries.
type Config struct {
	// Endpoint is the server's base URL, e.g. "https://sandbox.internal:8443".
	Endpoint string
	// APIKey is sent as "Authorization: Bearer <APIKey>".
	APIKey string
	// Timeout bounds one whole call: connecting, sending, the server's
	// wait, every retry and, for Execute and Wait, the polling until the
	// execution is final. Set it above the longest limits.timeout_ms you
	// send, or the client gives up while the server still runs the code.
	// Zero means no bound other than the call's context. Stream is not
	// bounded by it (a stream lasts as long as its execution).
	Timeout time.Duration
	// MaxRetries is how many times a call that is safe to repeat is
	// retried after a transport failure, a 429, or a 5xx: every read,
	// cancels, and submits (which always carry an execution id, see
	// ExecuteRequest.ExecutionID). Zero never retries.
	MaxRetries int
	// HTTPClient sends the requests. The default keeps 20 idle connections
	// per host (Go's default keeps 2) and has no overall timeout of its
	// own, since Timeout and the context bound each call.
	HTTPClient *http.Client
	// MaxConcurrent, when positive, caps how many Execute calls of this
	// client run at once; further calls wait for a slot (or their context).
	// It is the semaphore of docs/sdk.md's "Bounded concurrency", built in.
	MaxConcurrent int
}

// Client talks to a Corral server. It is safe for concurrent use by many
// goroutines; create one per server and reuse it, so connections are
// reused.
type Client struct {
	endpoint   string
	key        string
	timeout    time.Duration
	maxRetries int
	hc         *http.Client
	// sem holds one token per running Execute when MaxConcurrent > 0.
	sem chan struct{}
	// backoff is the first retry delay; tests shorten it.
	backoff time.Duration
}

// NewClient returns a client for cfg. It does not contact the server: a
// wrong endpoint or key shows on the first call.
func NewClient(cfg Config) *Client {
	c := &Client{
		endpoint:   strings.TrimRight(cfg.Endpoint, "/"),
		key:        cfg.APIKey,
		timeout:    cfg.Timeout,
		maxRetries: max(cfg.MaxRetries, 0),
		hc:         cfg.HTTPClient,
		backoff:    200 * time.Millisecond,
	}
	if c.endpoint == "" {
		c.endpoint = DefaultEndpoint
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: defaultTransport()}
	}
	if cfg.MaxConcurrent > 0 {
		c.sem = make(chan struct{}, cfg.MaxConcurrent)
	}
	return c
}

func defaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 100
	t.MaxIdleConnsPerHost = 20
	t.IdleConnTimeout = 90 * time.Second
	return t
}

// NewExecutionID returns a fresh execution id in the server's format: "ex_",
// a millisecond timestamp (ids sort by creation) and 64 random bits.
// Execute and Submit use it for requests without an id.
func NewExecutionID() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return fmt.Sprintf("ex_%011x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// callContext applies Config.Timeout to one call.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.timeout > 0 {
		return context.WithTimeout(ctx, c.timeout)
	}
	return context.WithCancel(ctx)
}

// request describes one API call.
type request struct {
	method string
	path   string // with query
	body   []byte
	// idempotent calls are retried; others are sent once.
	idempotent bool
	header     http.Header
	// executionID names the execution the call is about, for errors.
	executionID string
	// stream, if set, is sent once as the body with contentType (uploads);
	// such a call is never retried.
	stream      io.Reader
	contentType string
}

// do sends r, retrying where that is safe, and returns a response with a
// 2xx status; the caller closes its body. Every other outcome is an error:
// *APIError for an error answer, *TransportError when no answer came, or
// the context's error when ctx ended.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	attempts := 1
	if r.idempotent && r.stream == nil {
		attempts += c.maxRetries
	}
	var last error
	for attempt := 0; attempt < attempts; attempt++ {
		if attempt > 0 {
			wait := c.retryDelay(attempt, last)
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				// Sleeping past the deadline helps nobody: answer now.
				return nil, last
			}
			if err := sleep(ctx, wait); err != nil {
				return nil, c.ctxError(r, err)
			}
		}
		resp, err := c.send(ctx, r)
		if err != nil {
			if ctx.Err() != nil {
				return nil, c.ctxError(r, ctx.Err())
			}
			last = &TransportError{Op: r.method + " " + pathOnly(r.path), ExecutionID: r.executionID, Err: err}
			continue
		}
		if resp.StatusCode < 300 {
			return resp, nil
		}
		apiErr := readAPIError(resp)
		last = apiErr
		if !apiErr.temporary() {
			return nil, apiErr
		}
	}
	return nil, last
}

func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	if r.stream != nil {
		body = r.stream
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.endpoint+r.path, body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	switch {
	case r.stream != nil:
		req.Header.Set("Content-Type", r.contentType)
	case r.body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	req.Header.Set("User-Agent", "corral-go/"+Version)
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	return c.hc.Do(req)
}

func (c *Client) ctxError(r request, err error) error {
	if r.executionID != "" {
		return fmt.Errorf("%s %s (execution %s): %w", r.method, pathOnly(r.path), r.executionID, err)
	}
	return fmt.Errorf("%s %s: %w", r.method, pathOnly(r.path), err)
}

func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		return p[:i]
	}
	return p
}

// retryDelay is exponential backoff with jitter (half fixed, half random),
// capped at 5 s; a Retry-After from the server takes precedence.
func (c *Client) retryDelay(attempt int, last error) time.Duration {
	var ae *APIError
	if errors.As(last, &ae) && ae.RetryAfter > 0 {
		return ae.RetryAfter
	}
	return jitter(c.backoff<<min(attempt-1, 10), 5*time.Second)
}

// jitter returns a duration in [d/2, d), d capped at limit.
func jitter(d, limit time.Duration) time.Duration {
	d = min(d, limit)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxErrorBody caps how much of an error answer is read.
const maxErrorBody = 64 << 10

func readAPIError(resp *http.Response) *APIError {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	e := &APIError{Status: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			Field   string `json:"field"`
			TraceID string `json:"trace_id"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message, e.Field, e.TraceID = body.Error.Code, body.Error.Message, body.Error.Field, body.Error.TraceID
		return e
	}
	// Not Corral's error shape: a proxy or load balancer answered.
	e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	e.Message = strings.TrimSpace(string(raw))
	if e.Message == "" || len(e.Message) > 200 {
		e.Message = http.StatusText(resp.StatusCode)
	}
	return e
}

// parseRetryAfter reads delay-seconds or an HTTP date.
func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// decode reads one JSON value from a 2xx response and closes it.
func decode(resp *http.Response, r request, v any) error {
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return &TransportError{Op: r.method + " " + pathOnly(r.path), ExecutionID: r.executionID,
			Err: fmt.Errorf("decode %d answer: %w", resp.StatusCode, err)}
	}
	return nil
}
