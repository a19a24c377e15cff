package sandbox

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Snapshots of live sandboxes (/v1/snapshots): a snapshot keeps a
// sandbox's files (its disk, writable layer included) and, on gVisor, its
// memory: its processes and code contexts with their variables. It
// outlives the sandbox it was taken of; CreateSandboxRequest.SnapshotID
// makes new sandboxes from it, each going on from that moment on its own.

// MaxForks bounds ForkRequest.Count.
const MaxForks = 16

// Snapshot describes a snapshot (the OpenAPI schema Snapshot).
type Snapshot struct {
	SnapshotID string `json:"snapshot_id"`
	// Name is the client's name for it, unique among its tenant's
	// snapshots: a new snapshot given a name in use takes it over.
	Name string `json:"name,omitempty"`
	// SandboxID is the sandbox it was taken of.
	SandboxID string `json:"sandbox_id"`
	Language  string `json:"language"`
	Image     string `json:"image"`
	Tier      string `json:"tier"`
	// Memory: it kept the sandbox's memory (gVisor): a sandbox made from
	// it runs on its processes and code contexts. Without it, its files
	// only.
	Memory bool `json:"memory"`
	// SizeBytes is what it holds (the disk image's size as a sparse file
	// counts it, and the saved memory); StoredBytes what taking it added
	// to the store, compressed (chunks an earlier snapshot stored already
	// are not stored again).
	SizeBytes   int64 `json:"size_bytes"`
	StoredBytes int64 `json:"stored_bytes"`
	// DurationMS is how long taking it took; the sandbox was stopped for
	// PausedMS of it.
	DurationMS int64     `json:"duration_ms"`
	PausedMS   int64     `json:"paused_ms"`
	CreatedAt  time.Time `json:"created_at"`
}

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type CreateSnapshotRequest struct {
	// Name is optional: 1 to 64 letters, digits, '.', '_' or '-'.
	Name string `json:"name,omitempty"`
}

// SnapshotList is the answer of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
	// NextCursor, when set, fetches the next page (?cursor=).
	NextCursor string `json:"next_cursor,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	// Count is how many sandboxes to make, 1 to MaxForks (default 1).
	Count int `json:"count,omitempty"`
	// TimeoutSeconds is each fork's lifetime (default: the server's).
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// ForkResult is one fork of a ForkAnswer: its sandbox, or why it could
// not be made.
type ForkResult struct {
	Sandbox *Info      `json:"sandbox,omitempty"`
	Error   *ForkError `json:"error,omitempty"`
}

// ForkError is why a fork could not be made: an API error's code and
// message.
type ForkError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ForkAnswer is the answer of POST /v1/sandboxes/{id}/fork: one result
// per fork asked for.
type ForkAnswer struct {
	Forks []ForkResult `json:"forks"`
}

func snapshotPath(id string) string { return "/v1/snapshots/" + url.PathEscape(id) }

// Snapshot takes a snapshot of the sandbox, which runs on: on gVisor it
// is stopped for the moment its memory is saved (Snapshot.PausedMS), on
// runc its file system is frozen while its disk is copied.
func (s *Sandbox) Snapshot(ctx context.Context, req CreateSnapshotRequest) (*Snapshot, error) {
	var out Snapshot
	if err := s.c.call(ctx, http.MethodPost, s.path()+"/snapshots", req, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// Fork makes count sandboxes from one snapshot of the sandbox, each of
// which then goes its own way (the snapshot is not kept). Each fork
// succeeds or fails on its own: see each ForkResult.
func (s *Sandbox) Fork(ctx context.Context, req ForkRequest) ([]ForkResult, error) {
	var out ForkAnswer
	if err := s.c.call(ctx, http.MethodPost, s.path()+"/fork", req, &out, false); err != nil {
		return nil, err
	}
	return out.Forks, nil
}

// ListSnapshots lists the key's snapshots, newest first, those of
// sandboxID alone when it is set.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]Snapshot, error) {
	var all []Snapshot
	for sn, err := range allPages(func(cursor string) ([]Snapshot, string, error) {
		q := url.Values{}
		if sandboxID != "" {
			q.Set("sandbox_id", sandboxID)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var l SnapshotList
		if err := c.call(ctx, http.MethodGet, withQuery("/v1/snapshots", q), nil, &l, true); err != nil {
			return nil, "", err
		}
		return l.Snapshots, l.NextCursor, nil
	}, "") {
		if err != nil {
			return nil, err
		}
		all = append(all, *sn)
	}
	return all, nil
}

// GetSnapshot describes snapshot id (its id or name).
func (c *Client) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	var out Snapshot
	if err := c.call(ctx, http.MethodGet, snapshotPath(id), nil, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSnapshot deletes snapshot id (its id or name); sandboxes made
// from it are not touched.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, snapshotPath(id), nil, nil, true)
}
