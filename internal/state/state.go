// Package state keeps what is in flight and shared between nodes but may be
// lost without losing work: each execution's event log (output and status,
// resumable by id) and signals between nodes (work, cancel, done). What
// must survive — the queue, which node runs what, node heartbeats, session
// owners — is in the store. Implementations: memory (embedded default, one
// node) and redis; both pass statetest.
package state

import (
	"context"
	"errors"
	"time"
)

// Errors.
var (
	ErrClosed = errors.New("state closed")
)

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
	ChannelWork   = "work"   // message: empty; an execution was queued
	ChannelCancel = "cancel" // message: execution id
	ChannelDone   = "done"   // message: execution id
)

// State is implemented by memory.State and redis.State. Methods are safe for
// concurrent use. A State is scoped to a key prefix, so several deployments
// or tests can share one Redis.
type State interface {
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
