// Package state keeps what is in flight and shared between nodes: live
// executions with their heartbeats, the queue nodes pull work from, each
// execution's event log (output and status, resumable by id), and signals
// between nodes (cancel, done). Implementations: memory (embedded default,
// one node) and redis; both pass statetest.
package state

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// Errors.
var (
	ErrNotFound  = errors.New("not found")
	ErrQueueFull = errors.New("queue full")
	ErrClosed    = errors.New("state closed")
)

// Live is an execution in flight: execution:{id}.
type Live struct {
	ID        string         `json:"id"`
	Tenant    string         `json:"tenant"`
	Status    sandbox.Status `json:"status"` // queued or running
	Node      string         `json:"node,omitempty"`
	SandboxID string         `json:"sandbox_id,omitempty"`
	StartedAt time.Time      `json:"started_at,omitzero"`
	Heartbeat time.Time      `json:"heartbeat,omitzero"`
	// TimeoutMS is the execution's limit; the sweeper ends sandboxes that
	// run past twice it.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Event kinds.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventStatus = "status" // Data is the status, e.g. "running"
	EventNotice = "notice" // Data is a message about the stream (live output cut)
	EventDone   = "done"   // Data is the final record's JSON; the last event
)

// Event is one entry of an execution's event log.
type Event struct {
	// ID orders events of one execution; ids compare as integers and are
	// what an SSE client sends back as Last-Event-ID.
	ID   uint64 `json:"id"`
	Type string `json:"type"`
	Data []byte `json:"data"`
}

// Channels for Notify/Subscribe.
const (
	ChannelCancel = "cancel" // message: execution id
	ChannelDone   = "done"   // message: execution id
)

// State is implemented by memory.State and redis.State. Methods are safe for
// concurrent use. A State is scoped to a key prefix, so several deployments
// or tests can share one Redis.
type State interface {
	// SetLive creates or replaces execution:{l.ID}.
	SetLive(ctx context.Context, l Live) error
	// GetLive returns execution:{id} or ErrNotFound.
	GetLive(ctx context.Context, id string) (Live, error)
	// Heartbeat refreshes execution:{id}'s heartbeat to at if it is still
	// held by node; ErrNotFound if it is gone or held by another node.
	Heartbeat(ctx context.Context, id, node string, at time.Time) error
	// DeleteLive removes execution:{id}; a missing one is not an error.
	DeleteLive(ctx context.Context, id string) error
	// ListLive returns every live execution.
	ListLive(ctx context.Context) ([]Live, error)

	// Enqueue appends id to the shared queue unless it already holds bound
	// entries (ErrQueueFull). bound <= 0 means unbounded.
	Enqueue(ctx context.Context, id string, bound int) error
	// Dequeue removes and returns the oldest id, blocking until there is
	// one or ctx ends.
	Dequeue(ctx context.Context) (string, error)
	// RemoveQueued removes id from the queue; it reports whether it was
	// there (a cancelled execution that never started).
	RemoveQueued(ctx context.Context, id string) (bool, error)
	// QueueLen returns the queue's length.
	QueueLen(ctx context.Context) (int, error)

	// Append adds an event to id's log and returns its id. The log keeps at
	// most the last MaxEvents events.
	Append(ctx context.Context, id string, typ string, data []byte) (uint64, error)
	// Events returns id's events with ids greater than after, oldest first.
	// With wait, it blocks until there is at least one or ctx ends.
	Events(ctx context.Context, id string, after uint64, wait bool) ([]Event, error)
	// ExpireEvents drops id's log after ttl.
	ExpireEvents(ctx context.Context, id string, ttl time.Duration) error

	// Notify publishes msg on channel to every subscriber on every node.
	Notify(ctx context.Context, channel, msg string) error
	// Subscribe delivers channel's messages until ctx ends; the returned
	// channel is closed then. Messages published before Subscribe
	// returned are not delivered.
	Subscribe(ctx context.Context, channel string) (<-chan string, error)

	// Ping checks the connection (readiness).
	Ping(ctx context.Context) error
	Close() error
}

// MaxEvents is how many events an execution's log keeps.
const MaxEvents = 4096
