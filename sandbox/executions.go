package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Submitted is the server's answer to an asynchronous submit.
type Submitted struct {
	ExecutionID string `json:"execution_id"`
	Status      Status `json:"status"`
}

// prepare gives req an execution id when it has none, so that sending it
// again (a retry) cannot start a second execution: the server treats the
// same id with the same request as the same execution.
func prepare(req ExecuteRequest) (ExecuteRequest, []byte, error) {
	if req.ExecutionID == "" {
		req.ExecutionID = NewExecutionID()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return req, nil, fmt.Errorf("encode request: %w", err)
	}
	return req, body, nil
}

// Execute runs req and waits for its result. A failed execution returns
// both the *Result and an *Error (errors.As) with its Type; a successful one
// returns the Result and nil. If the server stops waiting before the
// execution ends (it holds a request for about limits.timeout_ms plus a
// margin), Execute keeps waiting by polling.
//
// Without req.ExecutionID one is generated, which makes retries safe; when
// the call's context ends first the error names the id, and the execution
// goes on on the server until it ends or is cancelled with Cancel.
//
// With Config.MaxConcurrent set, Execute first waits for a free slot.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest) (*Result, error) {
	if c.sem != nil {
		select {
		case c.sem <- struct{}{}:
			defer func() { <-c.sem }()
		case <-ctx.Done():
			return nil, fmt.Errorf("corral: wait for a concurrency slot: %w", ctx.Err())
		}
	}
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req, body, err := prepare(req)
	if err != nil {
		return nil, err
	}
	r := request{method: http.MethodPost, path: "/v1/executions?wait=true", body: body, idempotent: true,
		executionID: req.ExecutionID}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusAccepted {
		// The server's wait ran out first: the execution goes on.
		resp.Body.Close()
		return c.wait(ctx, req.ExecutionID)
	}
	var res Result
	if err := decode(resp, r, &res); err != nil {
		return nil, err
	}
	if !res.Status.Final() {
		return c.wait(ctx, req.ExecutionID)
	}
	return &res, failure(&res)
}

// Submit queues req and returns its execution id at once; follow it with
// GetExecution, Wait, Stream or a CallbackURL. Without req.ExecutionID one
// is generated (retries are then safe). Submitting an id again with the
// same request returns the same execution; with a different request it is
// ErrConflict.
func (c *Client) Submit(ctx context.Context, req ExecuteRequest) (string, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req, body, err := prepare(req)
	if err != nil {
		return "", err
	}
	r := request{method: http.MethodPost, path: "/v1/executions", body: body, idempotent: true, executionID: req.ExecutionID}
	resp, err := c.do(ctx, r)
	if err != nil {
		return "", err
	}
	var sub Submitted
	if err := decode(resp, r, &sub); err != nil {
		return "", err
	}
	if sub.ExecutionID == "" {
		sub.ExecutionID = req.ExecutionID
	}
	return sub.ExecutionID, nil
}

// GetExecution returns an execution's record as it is now, whatever its
// status: a failed execution is a Result with Status failed and Error set,
// not an error of this call.
func (c *Client) GetExecution(ctx context.Context, id string) (*Result, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return c.get(ctx, id)
}

func (c *Client) get(ctx context.Context, id string) (*Result, error) {
	r := request{method: http.MethodGet, path: "/v1/executions/" + url.PathEscape(id), idempotent: true, executionID: id}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var res Result
	if err := decode(resp, r, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Cancel stops an execution: a queued one never runs, a running one is
// killed. Cancelling a finished execution changes nothing and is not an
// error. Use CancelExecution for the record.
func (c *Client) Cancel(ctx context.Context, id string) error {
	_, err := c.CancelExecution(ctx, id)
	return err
}

// CancelExecution is Cancel returning the record as it is after the
// cancel (usually final, status cancelled).
func (c *Client) CancelExecution(ctx context.Context, id string) (*Result, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r := request{method: http.MethodPost, path: "/v1/executions/" + url.PathEscape(id) + "/cancel", idempotent: true, executionID: id}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var res Result
	if err := decode(resp, r, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Wait polls an execution until it is final, with backoff from 250 ms up
// to 2 s between polls, and returns like Execute: the Result, and an
// *Error when the execution did not succeed.
func (c *Client) Wait(ctx context.Context, id string) (*Result, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	return c.wait(ctx, id)
}

func (c *Client) wait(ctx context.Context, id string) (*Result, error) {
	delay := 250 * time.Millisecond
	for {
		res, err := c.get(ctx, id)
		if err != nil {
			return nil, err
		}
		if res.Status.Final() {
			return res, failure(res)
		}
		if err := sleep(ctx, jitter(delay, 2*time.Second)); err != nil {
			return nil, fmt.Errorf("corral: wait for execution %s (%s): %w", id, res.Status, err)
		}
		delay = min(delay*3/2, 2*time.Second)
	}
}

// ListOptions filter and order List. Zero fields do not filter.
type ListOptions struct {
	SessionID string
	Status    Status
	ErrorType ErrorType
	Language  string
	// ExitCodeNe keeps executions whose exit code is not this one (set it
	// to 0 for "every execution that exited non-zero").
	ExitCodeNe *int
	// Sort is created_at, -created_at (the default, newest first),
	// duration_ms or -duration_ms.
	Sort string
	// Limit is the page size, 1 to 1000 (the server's default when 0).
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
	// Since and Until bound created_at.
	Since, Until time.Time
}

func (o ListOptions) query() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("session_id", o.SessionID)
	set("status", string(o.Status))
	set("error_type", string(o.ErrorType))
	set("language", o.Language)
	set("sort", o.Sort)
	set("cursor", o.Cursor)
	if o.ExitCodeNe != nil {
		v.Set("exit_code_ne", strconv.Itoa(*o.ExitCodeNe))
	}
	if o.Limit > 0 {
		v.Set("limit", strconv.Itoa(o.Limit))
	}
	if !o.Since.IsZero() {
		v.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		v.Set("until", o.Until.UTC().Format(time.RFC3339Nano))
	}
	return v
}

// Page is one answer of List.
type Page struct {
	Executions []Result `json:"executions"`
	// NextCursor continues the listing; empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// List queries the tenant's executions (the structured log): by session,
// status, error type, language, exit code and time, ordered by creation
// or duration, one page at a time.
func (c *Client) List(ctx context.Context, opts ListOptions) (*Page, error) {
	var p Page
	if err := c.call(ctx, http.MethodGet, withQuery("/v1/executions", opts.query()), nil, &p, true); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListAll yields every execution matching opts, following the cursors
// page by page. It stops at the first error, which it yields.
func (c *Client) ListAll(ctx context.Context, opts ListOptions) iter.Seq2[*Result, error] {
	return allPages(func(cursor string) ([]Result, string, error) {
		opts.Cursor = cursor
		p, err := c.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return p.Executions, p.NextCursor, nil
	}, opts.Cursor)
}
