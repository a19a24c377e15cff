package sandbox

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// AuditEvent is one entry of a tenant's audit trail (GET /v1/audit): who
// (tenant, key id), what (action, fields), where (sandbox, execution,
// node), when, and the outcome. Seq numbers a tenant's events from 1 in
// the order they were stored; PrevHash is the Hash of the event before it
// ("" for the first), which makes the trail a hash chain (docs/audit.md
// says how Hash is computed and how to check it).
type AuditEvent struct {
	Tenant string    `json:"tenant"`
	Seq    int64     `json:"seq"`
	Time   time.Time `json:"time"`
	// KeyID names the API key that made the call (the first 16 hex digits
	// of its SHA-256), never the key; "token:…" for a call authenticated
	// by a sandbox's access token; "" for the server's own actions.
	KeyID       string            `json:"key_id,omitempty"`
	Node        string            `json:"node,omitempty"`
	SandboxID   string            `json:"sandbox_id,omitempty"`
	ExecutionID string            `json:"execution_id,omitempty"`
	Action      string            `json:"action"`
	Outcome     string            `json:"outcome"` // ok, error, denied
	Error       string            `json:"error,omitempty"`
	Fields      map[string]string `json:"fields,omitempty"`
	PrevHash    string            `json:"prev_hash"`
	Hash        string            `json:"hash"`
}

// Audit outcomes.
const (
	AuditOK     = "ok"
	AuditError  = "error"
	AuditDenied = "denied"
)

// AuditOptions filter GET /v1/audit. Zero fields do not filter.
type AuditOptions struct {
	SandboxID   string
	ExecutionID string
	Action      string
	KeyID       string
	// Since and Until bound the events' time.
	Since, Until time.Time
	// Limit is the page size, 1 to 1000 (the server's default when 0).
	Limit int
	// Cursor continues from a previous page's NextCursor.
	Cursor string
}

func (o AuditOptions) query() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("sandbox_id", o.SandboxID)
	set("execution_id", o.ExecutionID)
	set("action", o.Action)
	set("key_id", o.KeyID)
	if !o.Since.IsZero() {
		v.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if !o.Until.IsZero() {
		v.Set("until", o.Until.UTC().Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		v.Set("limit", strconv.Itoa(o.Limit))
	}
	set("cursor", o.Cursor)
	return v
}

// AuditPage is one page of GET /v1/audit, oldest event first.
type AuditPage struct {
	Events     []AuditEvent `json:"events"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// Audit returns one page of the caller's tenant's audit trail.
func (c *Client) Audit(ctx context.Context, opts AuditOptions) (*AuditPage, error) {
	var p AuditPage
	if err := c.call(ctx, http.MethodGet, withQuery("/v1/audit", opts.query()), nil, &p, true); err != nil {
		return nil, err
	}
	return &p, nil
}

// AuditAll yields every event matching opts, following the cursors page
// by page. It stops at the first error, which it yields.
func (c *Client) AuditAll(ctx context.Context, opts AuditOptions) iter.Seq2[*AuditEvent, error] {
	return allPages(func(cursor string) ([]AuditEvent, string, error) {
		opts.Cursor = cursor
		p, err := c.Audit(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		return p.Events, p.NextCursor, nil
	}, opts.Cursor)
}
