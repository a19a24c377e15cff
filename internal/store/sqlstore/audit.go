package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// ---- audit ----

const auditColumns = `tenant, seq, at, key_id, node, sandbox_id, execution_id, action, outcome, error, fields, prev_hash, hash`

// Statements on the audit trail.
const (
	// AuditHeadInit makes a tenant's head if it has none; it takes the
	// tenant.
	AuditHeadInit = `INSERT INTO audit_heads (tenant, seq, hash, pruned) VALUES ($1, 0, '', 0) ON CONFLICT (tenant) DO NOTHING`
	AuditHead     = `SELECT seq, hash, pruned FROM audit_heads WHERE tenant = $1`
	// AuditHeadSet takes tenant, seq, hash.
	AuditHeadSet = `UPDATE audit_heads SET seq = $2, hash = $3 WHERE tenant = $1`
	InsertAudit  = `INSERT INTO audit_events (` + auditColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`
	// AuditPruneUpTo takes tenant, Micros(before): the last number of
	// the events to delete.
	AuditPruneUpTo = `SELECT COALESCE(MAX(seq), 0) FROM audit_events WHERE tenant = $1 AND at < $2`
	// AuditPrune takes tenant, seq.
	AuditPrune = `DELETE FROM audit_events WHERE tenant = $1 AND seq <= $2`
	// AuditPruned takes tenant, seq.
	AuditPruned = `UPDATE audit_heads SET pruned = $2 WHERE tenant = $1 AND pruned < $2`
)

// AuditHeadLock selects a tenant's head (it takes the tenant), locking
// the row until the transaction ends with forUpdate (PostgreSQL; SQLite
// has one writer at a time).
func AuditHeadLock(forUpdate bool) string {
	if forUpdate {
		return AuditHead + " FOR UPDATE"
	}
	return AuditHead
}

// Tx is what AppendAudit needs of a transaction.
type Tx interface {
	Exec(ctx context.Context, query string, args ...any) error
	QueryRow(ctx context.Context, query string, args ...any) func(dest ...any) error
}

// AppendAudit is store.Store's AppendAudit in tx: tenants' heads are
// locked in name order (so two nodes' batches cannot deadlock), events
// sealed after them and inserted, heads moved.
func AppendAudit(ctx context.Context, tx Tx, forUpdate bool, events []sandbox.AuditEvent) ([]sandbox.AuditEvent, error) {
	out := slices.Clone(events)
	byTenant := map[string][]int{}
	for i := range out {
		if err := checkKey("tenant", out[i].Tenant); err != nil {
			return nil, refused(err)
		}
		audit.Clean(&out[i])
		for _, f := range []struct{ name, v string }{{"sandbox id", out[i].SandboxID}, {"execution id", out[i].ExecutionID},
			{"key id", out[i].KeyID}, {"action", out[i].Action}} {
			if err := checkKey(f.name, f.v); err != nil {
				return nil, refused(err)
			}
		}
		byTenant[out[i].Tenant] = append(byTenant[out[i].Tenant], i)
	}
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	for _, t := range tenants {
		if err := tx.Exec(ctx, AuditHeadInit, t); err != nil {
			return nil, fmt.Errorf("head of %s: %w", t, err)
		}
		var h audit.Head
		if err := tx.QueryRow(ctx, AuditHeadLock(forUpdate), t)(&h.Seq, &h.Hash, &h.Pruned); err != nil {
			return nil, fmt.Errorf("head of %s: %w", t, err)
		}
		for _, i := range byTenant[t] {
			e := &out[i]
			h.Seq, h.Hash = audit.Seal(e, h.Seq, h.Hash)
			if err := tx.Exec(ctx, InsertAudit, auditArgs(e)...); err != nil {
				return nil, fmt.Errorf("insert event %d of %s: %w", e.Seq, t, err)
			}
		}
		if err := tx.Exec(ctx, AuditHeadSet, t, h.Seq, h.Hash); err != nil {
			return nil, fmt.Errorf("head of %s: %w", t, err)
		}
	}
	return out, nil
}

// PruneAudit is store.Store's PruneAudit in tx.
func PruneAudit(ctx context.Context, tx Tx, tenant string, before int64) (int64, error) {
	var upTo int64
	if err := tx.QueryRow(ctx, AuditPruneUpTo, tenant, before)(&upTo); err != nil {
		return 0, fmt.Errorf("prune audit of %s: %w", tenant, err)
	}
	if upTo == 0 {
		return 0, nil
	}
	var h audit.Head
	if err := tx.QueryRow(ctx, AuditHead, tenant)(&h.Seq, &h.Hash, &h.Pruned); err != nil {
		return 0, fmt.Errorf("prune audit of %s: %w", tenant, err)
	}
	if err := tx.Exec(ctx, AuditPrune, tenant, upTo); err != nil {
		return 0, fmt.Errorf("prune audit of %s: %w", tenant, err)
	}
	if err := tx.Exec(ctx, AuditPruned, tenant, upTo); err != nil {
		return 0, fmt.Errorf("prune audit of %s: %w", tenant, err)
	}
	return max(upTo-h.Pruned, 0), nil
}

// refused marks err, a check of an event that failed, as the caller's
// fault (store.ErrInvalid): no retry stores it.
func refused(err error) error {
	if errors.Is(err, store.ErrInvalid) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrInvalid, err)
}

func auditArgs(e *sandbox.AuditEvent) []any {
	fields := "{}"
	if len(e.Fields) > 0 {
		b, _ := json.Marshal(e.Fields) // strings only: cannot fail
		fields = string(b)
	}
	return []any{e.Tenant, e.Seq, Micros(e.Time), e.KeyID, e.Node, e.SandboxID, e.ExecutionID, e.Action,
		e.Outcome, e.Error, fields, e.PrevHash, e.Hash}
}

// ScanAudit reads a row of an AuditList query.
func ScanAudit(scan func(dest ...any) error) (sandbox.AuditEvent, error) {
	var e sandbox.AuditEvent
	var at int64
	var fields string
	if err := scan(&e.Tenant, &e.Seq, &at, &e.KeyID, &e.Node, &e.SandboxID, &e.ExecutionID, &e.Action,
		&e.Outcome, &e.Error, &fields, &e.PrevHash, &e.Hash); err != nil {
		return e, err
	}
	e.Time = Time(at)
	if fields != "{}" {
		// A row whose fields are not an object is reported as it is: a
		// broken link for Verify, never a failed read.
		if err := json.Unmarshal([]byte(fields), &e.Fields); err != nil {
			e.Fields = map[string]string{"(unreadable)": fields}
		}
	}
	return e, nil
}

// AuditList is a prepared ListAudit query.
type AuditList struct {
	// SQL and Args select one row more than the page holds.
	SQL   string
	Args  []any
	limit int
}

const auditCursorSort = "audit_seq"

// NewAuditList checks q and builds the query of one page of tenant's
// events.
func NewAuditList(tenant string, q store.AuditQuery) (*AuditList, error) {
	l := &AuditList{limit: q.Limit}
	switch {
	case l.limit == 0:
		l.limit = DefaultLimit
	case l.limit < 0:
		return nil, fmt.Errorf("limit %d: want 1..%d", q.Limit, MaxLimit)
	case l.limit > MaxLimit:
		l.limit = MaxLimit
	}
	arg := func(v any) string {
		l.Args = append(l.Args, v)
		return "$" + strconv.Itoa(len(l.Args))
	}
	where := []string{"tenant = " + arg(tenant)}
	for _, f := range []struct{ col, name, v string }{
		{"sandbox_id", "sandbox id", q.SandboxID}, {"execution_id", "execution id", q.ExecutionID},
		{"action", "action", q.Action}, {"key_id", "key id", q.KeyID},
	} {
		if f.v == "" {
			continue
		}
		if err := checkKey(f.name, f.v); err != nil {
			return nil, fmt.Errorf("list audit: %w", err)
		}
		where = append(where, f.col+" = "+arg(f.v))
	}
	if !q.Since.IsZero() {
		where = append(where, "at >= "+arg(Micros(normTime(q.Since))))
	}
	if !q.Until.IsZero() {
		where = append(where, "at < "+arg(Micros(normTime(q.Until))))
	}
	if q.FromSeq > 0 {
		where = append(where, "seq >= "+arg(q.FromSeq))
	}
	if q.ToSeq > 0 {
		where = append(where, "seq <= "+arg(q.ToSeq))
	}
	if q.Cursor != "" {
		b, err := decodeAuditCursor(q.Cursor)
		if err != nil {
			return nil, err
		}
		where = append(where, "seq > "+arg(b))
	}
	l.SQL = fmt.Sprintf("SELECT %s FROM audit_events WHERE %s ORDER BY seq LIMIT %s",
		auditColumns, strings.Join(where, " AND "), arg(int64(l.limit+1)))
	return l, nil
}

func decodeAuditCursor(s string) (int64, error) {
	c, err := decodeCursorAny(s)
	if err != nil {
		return 0, err
	}
	if c.Sort != auditCursorSort || c.Value < 0 {
		return 0, ErrCursor
	}
	return c.Value, nil
}

// Page trims the rows to the page and returns the next page's cursor.
func (l *AuditList) Page(rows []sandbox.AuditEvent) ([]sandbox.AuditEvent, string) {
	if len(rows) <= l.limit {
		return rows, ""
	}
	rows = rows[:l.limit]
	return rows, cursor{Sort: auditCursorSort, Value: rows[len(rows)-1].Seq, ID: "-"}.encode()
}
