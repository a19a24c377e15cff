package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlstore"
	"github.com/corralhq/corral/sandbox"
)

// pgTx is a pgx.Tx as sqlstore.Tx.
type pgTx struct{ t pgx.Tx }

func (p pgTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := p.t.Exec(ctx, query, args...)
	return err
}

func (p pgTx) QueryRow(ctx context.Context, query string, args ...any) func(dest ...any) error {
	return p.t.QueryRow(ctx, query, args...).Scan
}

// AppendAudit implements store.Store. Each tenant's head row is locked
// FOR UPDATE until the commit: nodes appending for one tenant take turns,
// and the numbers they take follow each other.
func (db *DB) AppendAudit(ctx context.Context, events []sandbox.AuditEvent) (_ []sandbox.AuditEvent, err error) {
	defer unavailable(&err)
	if len(events) == 0 {
		return nil, nil
	}
	var out []sandbox.AuditEvent
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var err error
		out, err = sqlstore.AppendAudit(ctx, pgTx{tx}, true, events)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("append audit: %w", err)
	}
	return out, nil
}

// ListAudit implements store.Store.
func (db *DB) ListAudit(ctx context.Context, tenant string, q store.AuditQuery) (_ []sandbox.AuditEvent, _ string, err error) {
	defer unavailable(&err)
	l, err := sqlstore.NewAuditList(tenant, q)
	if err != nil {
		return nil, "", err
	}
	rows, _ := db.pool.Query(ctx, l.SQL, l.Args...)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandbox.AuditEvent, error) {
		return sqlstore.ScanAudit(r.Scan)
	})
	if err != nil {
		return nil, "", fmt.Errorf("list audit: %w", err)
	}
	out, next := l.Page(out)
	return out, next, nil
}

// AuditHead implements store.Store.
func (db *DB) AuditHead(ctx context.Context, tenant string) (_ audit.Head, err error) {
	defer unavailable(&err)
	var h audit.Head
	err = db.pool.QueryRow(ctx, sqlstore.AuditHead, tenant).Scan(&h.Seq, &h.Hash, &h.Pruned)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return h, fmt.Errorf("audit head of %s: %w", tenant, err)
	}
	return h, nil
}

// PruneAudit implements store.Store. The head is locked first, so a prune
// and an append for one tenant take turns.
func (db *DB) PruneAudit(ctx context.Context, tenant string, before time.Time) (_ int64, err error) {
	defer unavailable(&err)
	var n int64
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var h audit.Head
		if err := tx.QueryRow(ctx, sqlstore.AuditHeadLock(true), tenant).Scan(&h.Seq, &h.Hash, &h.Pruned); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			return err
		}
		var err error
		n, err = sqlstore.PruneAudit(ctx, pgTx{tx}, tenant, sqlstore.Micros(before))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune audit of %s: %w", tenant, err)
	}
	return n, nil
}
