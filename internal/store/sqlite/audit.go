package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlstore"
	"github.com/corralhq/corral/sandbox"
)

// sqlTx is a tx as sqlstore.Tx.
type sqlTx struct{ t *tx }

func (s sqlTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := s.t.ExecContext(ctx, query, args...)
	return err
}

func (s sqlTx) QueryRow(ctx context.Context, query string, args ...any) func(dest ...any) error {
	return s.t.QueryRowContext(ctx, query, args...).Scan
}

// inTx runs f in a write transaction, committed if f returns nil.
func (db *DB) inTx(ctx context.Context, f func(sqlstore.Tx) error, keep ...string) error {
	db.w.keep(ctx, keep...)
	t, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer t.Rollback()
	if err := f(sqlTx{t}); err != nil {
		return err
	}
	return t.Commit()
}

// AppendAudit implements store.Store. SQLite has one writer at a time:
// the head read in the transaction is the latest.
func (db *DB) AppendAudit(ctx context.Context, events []sandbox.AuditEvent) ([]sandbox.AuditEvent, error) {
	if len(events) == 0 {
		return nil, nil
	}
	var out []sandbox.AuditEvent
	err := db.inTx(ctx, func(tx sqlstore.Tx) error {
		var err error
		out, err = sqlstore.AppendAudit(ctx, tx, false, events)
		return err
	}, sqlstore.AuditHeadInit, sqlstore.AuditHead, sqlstore.InsertAudit, sqlstore.AuditHeadSet)
	if err != nil {
		return nil, fmt.Errorf("append audit: %w", err)
	}
	return out, nil
}

// ListAudit implements store.Store.
func (db *DB) ListAudit(ctx context.Context, tenant string, q store.AuditQuery) ([]sandbox.AuditEvent, string, error) {
	l, err := sqlstore.NewAuditList(tenant, q)
	if err != nil {
		return nil, "", err
	}
	rows, err := db.r.QueryContext(ctx, l.SQL, l.Args...)
	if err != nil {
		return nil, "", fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	var out []sandbox.AuditEvent
	for rows.Next() {
		e, err := sqlstore.ScanAudit(rows.Scan)
		if err != nil {
			return nil, "", fmt.Errorf("list audit: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("list audit: %w", err)
	}
	out, next := l.Page(out)
	return out, next, nil
}

// AuditHead implements store.Store.
func (db *DB) AuditHead(ctx context.Context, tenant string) (audit.Head, error) {
	var h audit.Head
	err := db.r.QueryRowContext(ctx, sqlstore.AuditHead, tenant).Scan(&h.Seq, &h.Hash, &h.Pruned)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return h, fmt.Errorf("audit head of %s: %w", tenant, err)
	}
	return h, nil
}

// PruneAudit implements store.Store.
func (db *DB) PruneAudit(ctx context.Context, tenant string, before time.Time) (int64, error) {
	var n int64
	err := db.inTx(ctx, func(tx sqlstore.Tx) error {
		var err error
		n, err = sqlstore.PruneAudit(ctx, tx, tenant, sqlstore.Micros(before))
		return err
	})
	return n, err
}
