package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Session is a workspace that persists across the executions that name it
// in ExecuteRequest.SessionID, for a sliding TTL.
type Session struct {
	ID         string    `json:"session_id"`
	DiskMB     int64     `json:"disk_mb"`
	TTLSeconds int64     `json:"ttl_seconds"`
	CreatedAt  time.Time `json:"created_at"`
	LastUsedAt time.Time `json:"last_used_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	Executions int64     `json:"executions"`
}

// SessionOptions create a session; zero fields take the server's defaults.
// The disk quota is fixed once the session exists.
type SessionOptions struct {
	TTL    time.Duration
	DiskMB int64
}

// FileEntry is a file or directory of a session's workspace.
type FileEntry struct {
	Name    string    `json:"name"`
	Dir     bool      `json:"dir,omitempty"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	Type    string    `json:"type"` // file, dir, symlink or other
}

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

// filePath escapes each segment of a workspace path, keeping the slashes.
func filePath(id, p string) string {
	segs := strings.Split(strings.Trim(p, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return sessionPath(id) + "/files/" + strings.Join(segs, "/")
}

// TouchSession creates a session or slides its TTL.
func (c *Client) TouchSession(ctx context.Context, id string, opts SessionOptions) (*Session, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	body, _ := json.Marshal(struct {
		TTLSeconds int64 `json:"ttl_seconds,omitempty"`
		DiskMB     int64 `json:"disk_mb,omitempty"`
	}{int64(opts.TTL.Seconds()), opts.DiskMB})
	r := request{method: http.MethodPut, path: sessionPath(id), body: body, idempotent: true}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var s Session
	if err := decode(resp, r, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// GetSession returns a live session (ErrNotFound once it expired or was
// deleted).
func (c *Client) GetSession(ctx context.Context, id string) (*Session, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r := request{method: http.MethodGet, path: sessionPath(id), idempotent: true}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var s Session
	if err := decode(resp, r, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteSession removes a session and everything in its workspace.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.do(ctx, request{method: http.MethodDelete, path: sessionPath(id), idempotent: true})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ListFiles lists a directory of a session's workspace ("" is its top).
func (c *Client) ListFiles(ctx context.Context, id, dir string) ([]FileEntry, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r := request{method: http.MethodGet, path: filePath(id, dir), idempotent: true}
	if dir == "" {
		r.path = sessionPath(id) + "/files/"
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		resp.Body.Close()
		return nil, errors.New("corral: " + dir + " is a file, not a directory")
	}
	var l struct {
		Entries []FileEntry `json:"entries"`
	}
	if err := decode(resp, r, &l); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// Upload writes r to a file of a session's workspace (creating the session
// and parent directories as needed). It is sent once, never retried.
func (c *Client) Upload(ctx context.Context, id, path string, r io.Reader) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.do(ctx, request{method: http.MethodPut, path: filePath(id, path), stream: r, contentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Download copies a file of a session's workspace into w.
func (c *Client) Download(ctx context.Context, id, path string, w io.Writer) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r := request{method: http.MethodGet, path: filePath(id, path), idempotent: true}
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "application/json") {
		return errors.New("corral: " + path + " is a directory, not a file")
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return &TransportError{Op: "GET " + pathOnly(r.path), Err: err}
	}
	return nil
}

// RemoveFile removes a file or directory tree of a session's workspace.
func (c *Client) RemoveFile(ctx context.Context, id, path string) error {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	resp, err := c.do(ctx, request{method: http.MethodDelete, path: filePath(id, path), idempotent: true})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// Egress returns an execution's egress audit log: every connection its
// program asked the proxy for.
func (c *Client) Egress(ctx context.Context, executionID string) ([]EgressAttempt, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	r := request{method: http.MethodGet, path: "/v1/executions/" + url.PathEscape(executionID) + "/egress", idempotent: true, executionID: executionID}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var l struct {
		Attempts []EgressAttempt `json:"attempts"`
	}
	if err := decode(resp, r, &l); err != nil {
		return nil, err
	}
	return l.Attempts, nil
}
