// Package sqlstore holds what the sqlite and postgres stores share, so that
// they differ only in how they talk to their database: how executions and
// deliveries map to columns, every statement (placeholders are $N, which
// both drivers bind by position), the list query with its opaque cursor,
// and the checks that keep text PostgreSQL would refuse (invalid UTF-8, NUL
// bytes) out of both, so the two behave alike.
package sqlstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// Micros encodes t as unix microseconds. The zero time encodes to its own
// (negative) value, so it round-trips and sorts before every real time.
func Micros(t time.Time) int64 { return t.UnixMicro() }

// Time decodes Micros, in UTC.
func Time(us int64) time.Time { return time.UnixMicro(us).UTC() }

// normTime is t as stored: microsecond precision, UTC.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(time.Microsecond).UTC()
}

// ErrText reports text a store refuses: PostgreSQL's TEXT holds neither
// invalid UTF-8 nor NUL bytes, and SQLite refuses the same so that both
// stores accept exactly the same input.
var ErrText = store.ErrInvalid.With("", "not UTF-8 text without NUL bytes")

// Text reports whether s can be stored as TEXT.
func Text(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// MaxKey is the longest tenant, id, session id or language, in bytes.
// Indexes hold them, and PostgreSQL refuses an index entry of more than
// about 2.7 KB; a bound that both stores share keeps them alike.
const MaxKey = 512

func checkText(field, s string) error {
	if !Text(s) {
		return ErrText.With(field, "is not UTF-8 text without NUL bytes")
	}
	return nil
}

func checkKey(field, s string) error {
	if len(s) > MaxKey {
		return fmt.Errorf("%s: %d bytes, longer than %d", field, len(s), MaxKey)
	}
	return checkText(field, s)
}

// ---- executions ----

// executionColumns are what every SELECT of executions returns, in the
// order ScanExecution reads them.
const executionColumns = "tenant, id, request_hash, request, record, node, target, cancel"

// Statements on executions.
const (
	InsertExecution = `INSERT INTO executions (tenant, id, request_hash, request, record, node, target,
    session_id, language, status, error_type, exit_code, duration_ms, created_at, finished_at, tier)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (tenant, id) DO NOTHING`
	GetExecution    = `SELECT ` + executionColumns + ` FROM executions WHERE tenant = $1 AND id = $2`
	ExecutionStatus = `SELECT status FROM executions WHERE tenant = $1 AND id = $2`
	// ExecutionsInStatus takes status, Micros(before), limit.
	ExecutionsInStatus = `SELECT ` + executionColumns + ` FROM executions
WHERE status = $1 AND created_at < $2 ORDER BY created_at, tenant, id LIMIT $3`
	CountAll    = `SELECT COUNT(*) FROM executions`
	CountTenant = `SELECT COUNT(*) FROM executions WHERE tenant = $1`
	CountQueued = `SELECT COUNT(*) FROM executions WHERE status = 'queued'`
	// RequestCancel takes tenant, id.
	RequestCancel = `UPDATE executions SET cancel = 1 WHERE tenant = $1 AND id = $2`
	// NodeExecutions takes the node.
	NodeExecutions = `SELECT ` + executionColumns + ` FROM executions
WHERE (node = $1 AND status = 'running') OR (target = $1 AND status = 'queued')
ORDER BY created_at, tenant, id`
)

// queuedFor is the oldest queued execution a node may run (the query takes
// the node): no target, or that node.
const queuedFor = ` FROM executions
WHERE status = 'queued' AND target IN ('', $1)
ORDER BY created_at, tenant, id LIMIT 1`

// ClaimNext selects the execution a node claims next (it takes the node);
// with skipLocked (PostgreSQL) concurrent claimers pass over each other's
// rows instead of waiting for them, and SQLite has one writer at a time.
func ClaimNext(skipLocked bool) string {
	lock := ""
	if skipLocked {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	return `SELECT ` + executionColumns + queuedFor + lock
}

// NextQueued selects the id of the execution a node would claim next (it
// takes the node), without locking it: whether there is one.
const NextQueued = `SELECT id` + queuedFor

// Claimed is e as node claims it at now: running on node, with the time
// it waited.
func Claimed(e *store.Execution, node string, now time.Time) *store.Execution {
	c := *e
	c.Node = node
	c.Record.Status = sandbox.StatusRunning
	c.Record.QueueMS = max(now.Sub(c.Record.CreatedAt).Milliseconds(), 0)
	return &c
}

// Row is an execution ready to be written.
type Row struct {
	// Execution is what the store holds once the row is written: the
	// input with times at microsecond precision in UTC, sharing no memory
	// with it.
	Execution *store.Execution
	record    string
	exitCode  any // nil or int64
}

// NewRow checks e and encodes it.
func NewRow(e *store.Execution) (*Row, error) {
	if e == nil {
		return nil, errors.New("execution: nil")
	}
	if e.Tenant == "" || e.ID == "" {
		return nil, fmt.Errorf("execution %q of tenant %q: tenant and id are required", e.ID, e.Tenant)
	}
	// Keys are checked as given: JSON would quietly replace invalid UTF-8.
	for _, f := range []struct{ name, value string }{
		{"tenant", e.Tenant}, {"execution id", e.ID}, {"session id", e.Record.SessionID},
		{"language", e.Record.Language}, {"status", string(e.Record.Status)},
		{"error type", string(errorType(&e.Record))}, {"tier", e.Record.Tier},
	} {
		if err := checkKey(f.name, f.value); err != nil {
			return nil, fmt.Errorf("execution %q: %w", e.ID, err)
		}
	}
	// A JSON round trip copies the record deeply (the returned execution
	// shares nothing with e) in the form it is stored in.
	raw, err := json.Marshal(&e.Record)
	if err != nil {
		return nil, fmt.Errorf("execution %q: encode record: %w", e.ID, err)
	}
	var r sandbox.Result
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("execution %q: copy record: %w", e.ID, err)
	}
	normTimes(reflect.ValueOf(&r).Elem())
	if r.ExecutionID == "" {
		r.ExecutionID = e.ID
	}
	if r.ExecutionID != e.ID {
		return nil, fmt.Errorf("execution %q: record is of execution %q", e.ID, r.ExecutionID)
	}
	for _, f := range []struct{ name, value string }{
		{"request hash", e.RequestHash}, {"request", string(e.Request)}, {"node", e.Node}, {"target", e.Target},
	} {
		if err := checkText(f.name, f.value); err != nil {
			return nil, fmt.Errorf("execution %q: %w", e.ID, err)
		}
	}
	var exit any
	if r.ExitCode != nil {
		if *r.ExitCode < math.MinInt32 || *r.ExitCode > math.MaxInt32 {
			return nil, fmt.Errorf("execution %q: exit code %d out of range", e.ID, *r.ExitCode)
		}
		exit = int64(*r.ExitCode)
	}
	rec, err := json.Marshal(&r)
	if err != nil {
		return nil, fmt.Errorf("execution %q: encode record: %w", e.ID, err)
	}
	stored := &store.Execution{Tenant: e.Tenant, ID: e.ID, RequestHash: e.RequestHash, Record: r, Node: e.Node,
		Target: e.Target, Cancel: e.Cancel}
	if len(e.Request) > 0 {
		stored.Request = bytes.Clone(e.Request)
	}
	return &Row{Execution: stored, record: string(rec), exitCode: exit}, nil
}

var timeType = reflect.TypeFor[time.Time]()

// normTimes sets every time in v, however deep (maps aside: the record has
// none), to microsecond precision in UTC, so that fields added to the
// record later are stored alike.
func normTimes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			normTimes(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			normTimes(v.Index(i))
		}
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(normTime(v.Interface().(time.Time))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				normTimes(v.Field(i))
			}
		}
	}
}

func errorType(r *sandbox.Result) sandbox.ErrorType {
	if r.Error == nil {
		return ""
	}
	return r.Error.Type
}

// InsertArgs are the arguments of InsertExecution.
func (r *Row) InsertArgs() []any {
	e := r.Execution
	return append([]any{e.Tenant, e.ID, e.RequestHash, string(e.Request), r.record, e.Node, e.Target}, r.derived()...)
}

// derived are the indexed columns taken from the record, in table order.
func (r *Row) derived() []any {
	rec := &r.Execution.Record
	return []any{rec.SessionID, rec.Language, string(rec.Status), string(errorType(rec)), r.exitCode,
		rec.DurationMS, Micros(rec.CreatedAt), Micros(rec.FinishedAt), rec.Tier}
}

// Statement is an SQL statement with its arguments.
type Statement struct {
	SQL  string
	Args []any
}

// Update returns the statements that replace the record and node of r's
// execution while its status is one of from (any when from is empty): the
// first (narrow) sets only what running and finishing an execution change,
// and applies only while the columns set at creation (session_id,
// language, created_at, tier) already hold the record's values; when it
// changes no row, the second (full) sets every column. Either changes one
// row, or none when the execution is absent or in another status.
//
// Why two: SQLite rewrites an index on an UPDATE only when the statement
// sets one of its columns, so the narrow one leaves the indexes on
// created_at, session_id and language alone, which a run's final record
// never changes. PostgreSQL writes an entry in every index once status
// changes, whatever the statement sets, so the postgres store runs full
// alone.
func (r *Row) Update(from []sandbox.Status) (narrow, full Statement) {
	e, rec := r.Execution, &r.Execution.Record
	narrow.Args = []any{e.Tenant, e.ID, r.record, e.Node, string(rec.Status), string(errorType(rec)), r.exitCode,
		rec.DurationMS, Micros(rec.FinishedAt), rec.SessionID, rec.Language, Micros(rec.CreatedAt), rec.Tier}
	narrow.SQL = `UPDATE executions SET record = $3, node = $4, status = $5, error_type = $6, exit_code = $7,
    duration_ms = $8, finished_at = $9
WHERE tenant = $1 AND id = $2 AND session_id = $10 AND language = $11 AND created_at = $12 AND tier = $13` +
		statusIn(&narrow.Args, from)
	full.Args = append([]any{e.Tenant, e.ID, r.record, e.Node}, r.derived()...)
	full.SQL = `UPDATE executions SET record = $3, node = $4, session_id = $5, language = $6,
    status = $7, error_type = $8, exit_code = $9, duration_ms = $10, created_at = $11, finished_at = $12,
    tier = $13
WHERE tenant = $1 AND id = $2` + statusIn(&full.Args, from)
	return narrow, full
}

// Claim returns the statement that makes r's execution, read as queued in
// the same transaction and passed through Claimed, running: only its
// record, node and status change (see Update for why fewer columns cost
// less), and only while it is still queued.
func (r *Row) Claim() Statement {
	e := r.Execution
	return Statement{SQL: ClaimExecution, Args: []any{e.Tenant, e.ID, r.record, e.Node, string(e.Record.Status)}}
}

// ClaimExecution is the SQL of Row.Claim.
const ClaimExecution = `UPDATE executions SET record = $3, node = $4, status = $5
WHERE tenant = $1 AND id = $2 AND status = 'queued'`

// statusIn is the condition that the status is one of from, its values
// appended to args; "" when from is empty.
func statusIn(args *[]any, from []sandbox.Status) string {
	if len(from) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(" AND status IN (")
	for i, s := range from {
		if i > 0 {
			b.WriteString(", ")
		}
		*args = append(*args, string(s))
		b.WriteString("$" + strconv.Itoa(len(*args)))
	}
	b.WriteString(")")
	return b.String()
}

// ScanExecution reads the columns of a SELECT of executions.
func ScanExecution(scan func(dest ...any) error) (*store.Execution, error) {
	var tenant, id, hash, req, rec, node, target string
	var cancel int64
	if err := scan(&tenant, &id, &hash, &req, &rec, &node, &target, &cancel); err != nil {
		return nil, err
	}
	e := &store.Execution{Tenant: tenant, ID: id, RequestHash: hash, Node: node, Target: target, Cancel: cancel != 0}
	if req != "" {
		e.Request = []byte(req)
	}
	if err := json.Unmarshal([]byte(rec), &e.Record); err != nil {
		return nil, fmt.Errorf("execution %q of tenant %q: decode record: %w", id, tenant, err)
	}
	return e, nil
}

// ---- deliveries ----

const deliveryColumns = `id, tenant, execution_id, kind, url, body, state, attempts,
    next_attempt, lease_until, last_status, last_error, created_at, updated_at`

// Statements on deliveries.
const (
	InsertDelivery = `INSERT INTO deliveries (` + deliveryColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`
	// UpdateDelivery takes the arguments of UpdateDeliveryArgs.
	UpdateDelivery = `UPDATE deliveries SET state = $2, attempts = $3, next_attempt = $4,
    lease_until = $5, last_status = $6, last_error = $7, updated_at = $8 WHERE id = $1`
	ListDeliveries = `SELECT ` + deliveryColumns + ` FROM deliveries
WHERE tenant = $1 AND execution_id = $2 ORDER BY created_at, id`
)

// ClaimDeliveries is the statement that leases due deliveries; it takes
// the arguments of ClaimArgs. With skipLocked (PostgreSQL) concurrent
// claimers pass over each other's rows instead of waiting for them; SQLite
// has one writer at a time and needs no row locks.
func ClaimDeliveries(skipLocked bool) string {
	lock := ""
	if skipLocked {
		lock = " FOR UPDATE SKIP LOCKED"
	}
	return `UPDATE deliveries SET lease_until = $1
WHERE id IN (SELECT id FROM deliveries
    WHERE state = '` + store.DeliveryPending + `' AND next_attempt <= $2 AND lease_until <= $2
    ORDER BY next_attempt, id LIMIT $3` + lock + `)
RETURNING ` + deliveryColumns
}

// ClaimArgs checks a claim and returns its arguments.
func ClaimArgs(now time.Time, lease time.Duration, limit int) ([]any, error) {
	if lease <= 0 || limit <= 0 {
		return nil, fmt.Errorf("claim deliveries: lease %v and limit %d must be positive", lease, limit)
	}
	return []any{Micros(now.Add(lease)), Micros(now), int64(limit)}, nil
}

func checkState(s string) error {
	switch s {
	case store.DeliveryPending, store.DeliveryDelivered, store.DeliveryFailed:
		return nil
	}
	return fmt.Errorf("delivery state %q unknown", s)
}

// DeliveryArgs checks the deliveries of execution e and returns the
// arguments of InsertDelivery for each. Tenant and ExecutionID default to
// e's and must match it; State defaults to pending.
func DeliveryArgs(e *store.Execution, ds []store.Delivery) ([][]any, error) {
	out := make([][]any, 0, len(ds))
	for _, d := range ds {
		if d.Tenant == "" {
			d.Tenant = e.Tenant
		}
		if d.ExecutionID == "" {
			d.ExecutionID = e.ID
		}
		if d.State == "" {
			d.State = store.DeliveryPending
		}
		if d.ID == "" {
			return nil, fmt.Errorf("delivery of execution %q: id is required", e.ID)
		}
		if d.Tenant != e.Tenant || d.ExecutionID != e.ID {
			return nil, fmt.Errorf("delivery %q: belongs to execution %q of tenant %q, not %q of %q",
				d.ID, d.ExecutionID, d.Tenant, e.ID, e.Tenant)
		}
		if err := checkState(d.State); err != nil {
			return nil, fmt.Errorf("delivery %q: %w", d.ID, err)
		}
		if err := checkKey("id", d.ID); err != nil {
			return nil, fmt.Errorf("delivery %q: %w", d.ID, err)
		}
		for _, f := range []struct{ name, value string }{
			{"kind", d.Kind}, {"url", d.URL}, {"body", string(d.Body)},
		} {
			if err := checkText(f.name, f.value); err != nil {
				return nil, fmt.Errorf("delivery %q: %w", d.ID, err)
			}
		}
		out = append(out, []any{d.ID, d.Tenant, d.ExecutionID, d.Kind, d.URL, string(d.Body), d.State,
			int64(d.Attempts), Micros(d.NextAttempt), Micros(d.LeaseUntil), int64(d.LastStatus),
			errorText(d.LastError), Micros(d.CreatedAt), Micros(d.UpdatedAt)})
	}
	return out, nil
}

// UpdateDeliveryArgs checks d and returns the arguments of UpdateDelivery.
// An id that cannot be stored cannot exist: store.ErrNotFound.
func UpdateDeliveryArgs(d store.Delivery) ([]any, error) {
	if !Text(d.ID) {
		return nil, fmt.Errorf("delivery %q: %w", d.ID, store.ErrNotFound)
	}
	if err := checkState(d.State); err != nil {
		return nil, fmt.Errorf("delivery %q: %w", d.ID, err)
	}
	return []any{d.ID, d.State, int64(d.Attempts), Micros(d.NextAttempt), Micros(d.LeaseUntil),
		int64(d.LastStatus), errorText(d.LastError), Micros(d.UpdatedAt)}, nil
}

// errorText makes an error message storable rather than refuse it: losing
// the outcome of an attempt over a stray byte would be worse.
func errorText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// ScanDelivery reads the columns of a SELECT (or RETURNING) of deliveries.
func ScanDelivery(scan func(dest ...any) error) (store.Delivery, error) {
	var (
		d                                 store.Delivery
		body                              string
		attempts, lastStatus              int64
		next, lease, createdAt, updatedAt int64
	)
	if err := scan(&d.ID, &d.Tenant, &d.ExecutionID, &d.Kind, &d.URL, &body, &d.State, &attempts,
		&next, &lease, &lastStatus, &d.LastError, &createdAt, &updatedAt); err != nil {
		return store.Delivery{}, err
	}
	if body != "" {
		d.Body = []byte(body)
	}
	d.Attempts, d.LastStatus = int(attempts), int(lastStatus)
	d.NextAttempt, d.LeaseUntil = Time(next), Time(lease)
	d.CreatedAt, d.UpdatedAt = Time(createdAt), Time(updatedAt)
	return d, nil
}

// ---- egress ----

// Statements on egress attempts.
const (
	NextEgressSeq = `SELECT COALESCE(MAX(seq), 0) FROM egress WHERE tenant = $1 AND execution_id = $2`
	InsertEgress  = `INSERT INTO egress (tenant, execution_id, seq, at, method, host, port, allowed, reason,
    address, status, bytes_up, bytes_down) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`
	ListEgress = `SELECT at, method, host, port, allowed, reason, address, status, bytes_up, bytes_down
FROM egress WHERE tenant = $1 AND execution_id = $2 ORDER BY seq`
)

// EgressArgs returns the arguments of InsertEgress for attempts numbered
// from first.
func EgressArgs(tenant, executionID string, first int, attempts []sandbox.EgressAttempt) ([][]any, error) {
	if err := checkKey("tenant", tenant); err != nil {
		return nil, err
	}
	if err := checkKey("execution id", executionID); err != nil {
		return nil, err
	}
	out := make([][]any, len(attempts))
	for i, a := range attempts {
		allowed := 0
		if a.Allowed {
			allowed = 1
		}
		out[i] = []any{tenant, executionID, int64(first + i), Micros(normTime(a.Time)), errorText(a.Method),
			errorText(a.Host), int64(a.Port), int64(allowed), errorText(a.Reason), errorText(a.Address),
			int64(a.Status), a.BytesUp, a.BytesDown}
	}
	return out, nil
}

// ScanEgress reads a row of ListEgress.
func ScanEgress(scan func(dest ...any) error) (sandbox.EgressAttempt, error) {
	var a sandbox.EgressAttempt
	var at, port, allowed, status int64
	if err := scan(&at, &a.Method, &a.Host, &port, &allowed, &a.Reason, &a.Address, &status, &a.BytesUp, &a.BytesDown); err != nil {
		return a, err
	}
	a.Time, a.Port, a.Allowed, a.Status = Time(at), int(port), allowed == 1, int(status)
	return a, nil
}

// ---- nodes and sessions ----

// Statements on nodes.
const (
	// BeatNode takes id, address, Micros(started), Micros(seen).
	BeatNode = `INSERT INTO nodes (id, address, started_at, seen_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET address = excluded.address, started_at = excluded.started_at,
    seen_at = excluded.seen_at`
	ListNodes = `SELECT id, address, started_at, seen_at FROM nodes ORDER BY id`
	// ForgetNode takes id, Micros(seenBefore).
	ForgetNode = `DELETE FROM nodes WHERE id = $1 AND seen_at < $2`
)

// NodeArgs checks n and returns the arguments of BeatNode.
func NodeArgs(n store.Node) ([]any, error) {
	if n.ID == "" {
		return nil, errors.New("node: id is required")
	}
	if err := checkKey("node id", n.ID); err != nil {
		return nil, err
	}
	if err := checkText("node address", n.Address); err != nil {
		return nil, err
	}
	return []any{n.ID, n.Address, Micros(normTime(n.StartedAt)), Micros(normTime(n.SeenAt))}, nil
}

// ScanNode reads a row of ListNodes.
func ScanNode(scan func(dest ...any) error) (store.Node, error) {
	var n store.Node
	var started, seen int64
	if err := scan(&n.ID, &n.Address, &started, &seen); err != nil {
		return n, err
	}
	n.StartedAt, n.SeenAt = Time(started), Time(seen)
	return n, nil
}

// Statements on sessions.
const (
	// ClaimSession takes tenant, id, node, Micros(now).
	ClaimSession = `INSERT INTO sessions (tenant, id, node, created_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant, id) DO NOTHING`
	SessionOwner   = `SELECT node FROM sessions WHERE tenant = $1 AND id = $2`
	ReleaseSession = `DELETE FROM sessions WHERE tenant = $1 AND id = $2 AND node = $3`
	// MoveSession takes tenant, id, from, to.
	MoveSession  = `UPDATE sessions SET node = $4 WHERE tenant = $1 AND id = $2 AND node = $3`
	NodeSessions = `SELECT tenant, id FROM sessions WHERE node = $1 ORDER BY tenant, id`
	// SetSessionInfo takes tenant, id, node, info.
	SetSessionInfo = `UPDATE sessions SET info = $4 WHERE tenant = $1 AND id = $2 AND node = $3`
	ListSessions   = `SELECT tenant, id, node, info FROM sessions WHERE tenant = $1 AND info <> '' ORDER BY id`
)

// SessionInfoArgs checks a session's description and returns the
// arguments of SetSessionInfo.
func SessionInfoArgs(tenant, id, node string, info []byte) ([]any, error) {
	if len(info) > store.MaxSessionInfo {
		return nil, fmt.Errorf("session %q: description of %d bytes, above %d: %w", id, len(info), store.MaxSessionInfo, store.ErrInvalid)
	}
	if err := checkText("session description", string(info)); err != nil {
		return nil, fmt.Errorf("session %q: %w", id, err)
	}
	return []any{tenant, id, node, string(info)}, nil
}

// SessionArgs checks a session's key and owner and returns the arguments
// of ClaimSession.
func SessionArgs(tenant, id, node string, now time.Time) ([]any, error) {
	for _, f := range []struct{ name, value string }{{"tenant", tenant}, {"session id", id}, {"node", node}} {
		if f.value == "" {
			return nil, fmt.Errorf("session: %s is required", f.name)
		}
		if err := checkKey(f.name, f.value); err != nil {
			return nil, fmt.Errorf("session %q: %w", id, err)
		}
	}
	return []any{tenant, id, node, Micros(normTime(now))}, nil
}
