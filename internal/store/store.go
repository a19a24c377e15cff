// Package store keeps the final and durable records of the service:
// executions (with the request that created them, for idempotency and for
// running queued work after a restart), callback deliveries, and the
// indexes the query API needs. Implementations: sqlite (embedded default)
// and postgres; both pass storetest.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/sandbox"
)

// Errors.
var (
	// ErrNotFound: no such record for this tenant.
	ErrNotFound = fault.New(fault.NotFound, "not found")
	// ErrStale: a conditional update found the record in another state.
	ErrStale = errors.New("record changed")
	// ErrInvalid: the store refuses an argument (a cursor it did not hand
	// out, text it cannot hold); the caller's input is at fault.
	ErrInvalid = fault.New(fault.InvalidArgument, "the request holds a value the server cannot keep")
	// ErrUnavailable: the database could not be reached or is restarting;
	// the call may succeed if repeated after a pause.
	ErrUnavailable = &fault.Error{Kind: fault.Unavailable, Code: "unavailable", RetryAfter: time.Second,
		Message: "the server's database is unavailable for a moment; retry after the delay in Retry-After"}
)

// Execution is a stored execution.
type Execution struct {
	Tenant string
	// ID is the execution id (Record.ExecutionID); unique per tenant.
	ID string
	// RequestHash identifies the request's content, so the same id with a
	// different body can be refused (409).
	RequestHash string
	// Request is the normalized request as JSON.
	Request []byte
	// Record is the execution record of docs/api.md. Its Status, Error.Type,
	// ExitCode, SessionID, Language, DurationMS, CreatedAt and FinishedAt
	// are indexed for Query.
	Record sandbox.Result
	// Node is the node that runs or ran it, if any.
	Node string
	// Target is the node that must run it while it is queued ("" any): a
	// session's executions go to the node that holds the session. Set at
	// creation.
	Target string
	// Cancel is set once a client asked to cancel it (RequestCancel); the
	// node running it learns it from here if the signal was missed.
	Cancel bool
}

// Node is a corral serve process of a cluster, as it announces itself.
type Node struct {
	ID string
	// Address is where other nodes reach its API ("host:port").
	Address   string
	StartedAt time.Time
	// SeenAt is its last heartbeat, by its own clock.
	SeenAt time.Time
}

// SessionRef names a session.
type SessionRef struct {
	Tenant, ID string
}

// SessionInfo is a session as ListSessions returns it: its owner and the
// description the owner published (SetSessionInfo).
type SessionInfo struct {
	Tenant, ID, Node string
	Info             []byte
}

// NoNode owns a session handed off by its node (MoveSession).
const NoNode = "-"

// MaxSessionInfo caps a session's published description, in bytes.
const MaxSessionInfo = 16 << 10

// Query filters and orders ListExecutions. Zero fields do not filter.
type Query struct {
	SessionID string
	Status    sandbox.Status
	ErrorType sandbox.ErrorType
	Language  string
	// ExitCodeNe keeps executions whose exit code is set and differs.
	ExitCodeNe *int
	// Sort is one of "created_at", "-created_at" (the default, newest
	// first), "duration_ms", "-duration_ms".
	Sort string
	// Limit caps the page (1..1000; 0 means 50).
	Limit int
	// Cursor continues a previous page; opaque to callers.
	Cursor string
	// Since and Until bound created_at when set.
	Since, Until time.Time
}

// AuditQuery filters ListAudit. Zero fields do not filter. Events come
// in chain order (Seq ascending).
type AuditQuery struct {
	SandboxID, ExecutionID, Action, KeyID string
	// Since (inclusive) and Until (exclusive) bound the events' time.
	Since, Until time.Time
	// FromSeq and ToSeq bound Seq, inclusive, when set.
	FromSeq, ToSeq int64
	// Limit caps the page (1..1000; 0 means 50).
	Limit int
	// Cursor continues a previous page; opaque to callers.
	Cursor string
}

// Stats summarises a tenant's executions created in a window: what the
// dashboard's overview shows. Only executions whose status is final count
// towards the error types, tiers and percentiles.
type Stats struct {
	// Total counts the executions created in the window, in any status.
	Total int64
	// ByStatus counts them by status.
	ByStatus map[sandbox.Status]int64
	// ByErrorType counts final executions that carry an error, by type.
	ByErrorType map[sandbox.ErrorType]int64
	// ByTier counts final executions by the tier that ran them; "" is
	// none (the execution never reached a sandbox, or its record was
	// stored before tiers were indexed).
	ByTier map[string]int64
	// Duration is the program run time (duration_ms) of final executions
	// that ran (duration_ms > 0), as corral_execution_duration_seconds
	// observes it.
	Duration Percentiles
	// Latency is finished_at − created_at in milliseconds (truncated) of
	// final executions, as corral_execution_latency_seconds observes it.
	Latency Percentiles
}

// Percentiles describe Count values by nearest rank: with the values
// sorted ascending and numbered from 1, Pn is the value at rank
// ceil(n/100 × Count), the smallest value that at least n% of the values
// do not exceed; Max is the value at rank Count. Every field is 0 when
// Count is 0.
type Percentiles struct {
	Count, P50, P95, P99, Max int64
}

// Rank is the 1-based nearest rank of percentile p (1..100) among n
// values: ceil(p × n / 100), 0 when n is 0.
func Rank(p, n int64) int64 {
	return (p*n + 99) / 100
}

// Delivery kinds.
const (
	KindCallback = "callback"
	KindMemory   = "memory"
)

// Delivery states.
const (
	DeliveryPending   = "pending"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed" // gave up
)

// Delivery is one outgoing signed POST (a callback, or a summary for a
// memory service), persisted so that a restart loses none.
type Delivery struct {
	ID          string // Corral-Delivery-Id; unique
	Tenant      string
	ExecutionID string
	Kind        string
	URL         string
	// Body is the exact payload to POST.
	Body        []byte
	State       string
	Attempts    int
	NextAttempt time.Time
	// LeaseUntil is set while a node is sending it.
	LeaseUntil time.Time
	LastStatus int    // HTTP status of the last attempt, 0 if none
	LastError  string // why the last attempt failed
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Store is implemented by sqlite.DB and postgres.DB. Methods are safe for
// concurrent use; times are stored with microsecond precision in UTC.
type Store interface {
	// CreateExecution inserts e unless (e.Tenant, e.ID) exists. It returns
	// the stored execution — e, or the existing one — and whether it was
	// created. The caller compares RequestHash to detect a conflict.
	CreateExecution(ctx context.Context, e *Execution) (*Execution, bool, error)
	// UpdateExecution replaces the record of (e.Tenant, e.ID) and its
	// Node, but only while its current status is one of from (any status
	// when from is empty); otherwise ErrStale. ErrNotFound if absent.
	UpdateExecution(ctx context.Context, e *Execution, from ...sandbox.Status) error
	// FinishExecution is UpdateExecution that also inserts deliveries, in
	// one transaction: a final record is never stored without its
	// callbacks. It returns the record as stored (GetExecution's Record
	// until the next update), so that the caller need not read it back.
	FinishExecution(ctx context.Context, e *Execution, deliveries []Delivery, from ...sandbox.Status) (*sandbox.Result, error)
	// GetExecution returns one execution of a tenant, or ErrNotFound.
	GetExecution(ctx context.Context, tenant, id string) (*Execution, error)
	// ListExecutions returns a tenant's executions matching q and a cursor
	// for the next page ("" when there is none).
	ListExecutions(ctx context.Context, tenant string, q Query) ([]*Execution, string, error)
	// ExecutionsInStatus returns executions of every tenant in status,
	// created before before, oldest first, at most limit.
	ExecutionsInStatus(ctx context.Context, status sandbox.Status, before time.Time, limit int) ([]*Execution, error)

	// ClaimExecution is how a node takes work: the oldest queued execution
	// of any tenant that node may run (no target, or node as its target)
	// becomes running on node, in one transaction no other claimer can
	// interleave with, and is returned as stored — Record.Status running,
	// Record.QueueMS the milliseconds from its creation to now, Node node.
	// ErrNotFound when nothing is queued for node.
	ClaimExecution(ctx context.Context, node string, now time.Time) (*Execution, error)
	// CountQueued counts queued executions of every tenant.
	CountQueued(ctx context.Context) (int, error)
	// RequestCancel sets an execution's Cancel; ErrNotFound if absent.
	RequestCancel(ctx context.Context, tenant, id string) error
	// NodeExecutions returns the executions running on node and those
	// queued for it (its target), oldest first.
	NodeExecutions(ctx context.Context, node string) ([]*Execution, error)

	// Beat records n as alive: its address, start and SeenAt.
	Beat(ctx context.Context, n Node) error
	// Nodes lists every node that announced itself and was not forgotten.
	Nodes(ctx context.Context) ([]Node, error)
	// ForgetNode removes node id unless it was seen after seenBefore (it
	// came back meanwhile).
	ForgetNode(ctx context.Context, id string, seenBefore time.Time) error

	// ClaimSession returns the node that owns session (tenant, id), making
	// node its owner if it has none.
	ClaimSession(ctx context.Context, tenant, id, node string, now time.Time) (string, error)
	// SessionOwner returns the node that owns a session, or ErrNotFound.
	SessionOwner(ctx context.Context, tenant, id string) (string, error)
	// ReleaseSession removes a session's owner if it is node; releasing a
	// session node does not own is not an error.
	ReleaseSession(ctx context.Context, tenant, id, node string) error
	// MoveSession makes node to the owner of session (tenant, id) if
	// node from owns it, its description kept, and returns the owner
	// after (ErrNotFound: none). Either may be NoNode: a session moved to
	// NoNode is handed off, owned by no node yet still claimed (a claim
	// answers NoNode), until a node moves it from NoNode to itself; of
	// nodes that race to, one wins.
	MoveSession(ctx context.Context, tenant, id, from, to string) (string, error)
	// NodeSessions lists the sessions node owns.
	NodeSessions(ctx context.Context, node string) ([]SessionRef, error)
	// SetSessionInfo stores the description of a session node owns (at
	// most MaxSessionInfo bytes; ErrInvalid beyond); ErrNotFound when node
	// does not own it.
	SetSessionInfo(ctx context.Context, tenant, id, node string, info []byte) error
	// ListSessions lists a tenant's sessions that have a description, by
	// id.
	ListSessions(ctx context.Context, tenant string) ([]SessionInfo, error)
	// CountExecutions counts a tenant's executions ("" for all tenants).
	CountExecutions(ctx context.Context, tenant string) (int64, error)
	// ExecutionStats summarises a tenant's executions created in [since,
	// until); ErrInvalid unless since is before until.
	ExecutionStats(ctx context.Context, tenant string, since, until time.Time) (*Stats, error)

	// ClaimDeliveries leases up to limit pending deliveries that are due at
	// now and not leased by another node, until now+lease.
	ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]Delivery, error)
	// UpdateDelivery stores the outcome of an attempt (State, Attempts,
	// NextAttempt, LeaseUntil, LastStatus, LastError, UpdatedAt).
	UpdateDelivery(ctx context.Context, d Delivery) error
	// Deliveries lists the deliveries of one execution of a tenant, oldest
	// first.
	Deliveries(ctx context.Context, tenant, executionID string) ([]Delivery, error)

	// AddEgress records an execution's egress attempts (appending to any
	// already recorded).
	AddEgress(ctx context.Context, tenant, executionID string, attempts []sandbox.EgressAttempt) error
	// Egress lists an execution's egress attempts in order.
	Egress(ctx context.Context, tenant, executionID string) ([]sandbox.EgressAttempt, error)

	// AppendAudit implements audit.Store: events (of any tenants) are
	// numbered, linked and hashed (audit.Seal) after their tenant's head,
	// which the transaction holds locked, and inserted; it returns them as
	// stored. ErrInvalid (nothing stored) when one cannot be held.
	AppendAudit(ctx context.Context, events []sandbox.AuditEvent) ([]sandbox.AuditEvent, error)
	// ListAudit returns a tenant's events matching q and a cursor for the
	// next page ("" when there is none).
	ListAudit(ctx context.Context, tenant string, q AuditQuery) ([]sandbox.AuditEvent, string, error)
	// AuditHead returns a tenant's chain head (the zero Head before its
	// first event).
	AuditHead(ctx context.Context, tenant string) (audit.Head, error)
	// PruneAudit implements audit.Pruner: it deletes the tenant's oldest
	// events, up to the last one stored before before, and records the
	// last number deleted in the head.
	PruneAudit(ctx context.Context, tenant string, before time.Time) (int64, error)

	// Ping checks the connection (readiness).
	Ping(ctx context.Context) error
	Close() error
}

// VerifyAudit checks tenant's chain from event from to event to (0: from
// the first kept, up to the head), reading it a page at a time: nil if it
// holds, an *audit.Broken naming the first broken link if not, or the
// store's error. It returns how many events held.
func VerifyAudit(ctx context.Context, s Store, tenant string, from, to int64) (int64, error) {
	head, err := s.AuditHead(ctx, tenant)
	if err != nil {
		return 0, err
	}
	v := audit.NewVerifier(tenant, head, from, to)
	lo, hi := v.Range()
	q := AuditQuery{FromSeq: lo, ToSeq: hi, Limit: 1000}
	for lo <= hi {
		page, next, err := s.ListAudit(ctx, tenant, q)
		if err != nil {
			return v.Checked(), err
		}
		for i := range page {
			if err := v.Next(&page[i]); err != nil {
				return v.Checked(), err
			}
		}
		if next == "" {
			break
		}
		q.Cursor = next
	}
	return v.Checked(), v.End()
}
