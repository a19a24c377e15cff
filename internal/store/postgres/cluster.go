package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlstore"
)

// ClaimExecution implements store.Store: the next row is locked with FOR
// UPDATE SKIP LOCKED, so nodes claiming at once take different executions
// without waiting for each other, and made running in the same
// transaction.
func (db *DB) ClaimExecution(ctx context.Context, node string, now time.Time) (_ *store.Execution, err error) {
	defer unavailable(&err)
	if node == "" || !sqlstore.Text(node) {
		return nil, fmt.Errorf("claim execution: node %q: %w", node, store.ErrInvalid)
	}
	var claimed *store.Execution
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		e, err := sqlstore.ScanExecution(tx.QueryRow(ctx, sqlstore.ClaimNext(true), node).Scan)
		if err != nil {
			return err
		}
		row, err := sqlstore.NewRow(sqlstore.Claimed(e, node, now))
		if err != nil {
			return err
		}
		st := row.Claim()
		if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
			return err
		}
		claimed = row.Execution
		return nil
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("claim execution: %w", store.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("claim execution: %w", err)
	}
	return claimed, nil
}

// CountQueued implements store.Store.
func (db *DB) CountQueued(ctx context.Context) (_ int, err error) {
	defer unavailable(&err)
	var n int
	if err := db.pool.QueryRow(ctx, sqlstore.CountQueued).Scan(&n); err != nil {
		return 0, fmt.Errorf("count queued executions: %w", err)
	}
	return n, nil
}

// RequestCancel implements store.Store.
func (db *DB) RequestCancel(ctx context.Context, tenant, id string) (err error) {
	defer unavailable(&err)
	if !sqlstore.Text(tenant) || !sqlstore.Text(id) {
		return fmt.Errorf("cancel execution %q: %w", id, store.ErrNotFound)
	}
	tag, err := db.pool.Exec(ctx, sqlstore.RequestCancel, tenant, id)
	if err != nil {
		return fmt.Errorf("cancel execution %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("cancel execution %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// NodeExecutions implements store.Store.
func (db *DB) NodeExecutions(ctx context.Context, node string) (_ []*store.Execution, err error) {
	defer unavailable(&err)
	if !sqlstore.Text(node) {
		return nil, nil
	}
	es, err := db.executions(ctx, sqlstore.NodeExecutions, node)
	if err != nil {
		return nil, fmt.Errorf("executions of node %s: %w", node, err)
	}
	return es, nil
}

// Beat implements store.Store.
func (db *DB) Beat(ctx context.Context, n store.Node) (err error) {
	defer unavailable(&err)
	args, err := sqlstore.NodeArgs(n)
	if err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	if _, err := db.pool.Exec(ctx, sqlstore.BeatNode, args...); err != nil {
		return fmt.Errorf("node heartbeat %s: %w", n.ID, err)
	}
	return nil
}

// Nodes implements store.Store.
func (db *DB) Nodes(ctx context.Context) (_ []store.Node, err error) {
	defer unavailable(&err)
	rows, _ := db.pool.Query(ctx, sqlstore.ListNodes) // CollectRows reports the error
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Node, error) {
		return sqlstore.ScanNode(r.Scan)
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// ForgetNode implements store.Store.
func (db *DB) ForgetNode(ctx context.Context, id string, seenBefore time.Time) (err error) {
	defer unavailable(&err)
	if !sqlstore.Text(id) {
		return nil
	}
	if _, err := db.pool.Exec(ctx, sqlstore.ForgetNode, id, sqlstore.Micros(seenBefore)); err != nil {
		return fmt.Errorf("forget node %s: %w", id, err)
	}
	return nil
}

// ClaimSession implements store.Store. A concurrent claim of the same
// session makes ON CONFLICT wait for it to commit, so the SELECT after it
// finds the winner.
func (db *DB) ClaimSession(ctx context.Context, tenant, id, node string, now time.Time) (_ string, err error) {
	defer unavailable(&err)
	args, err := sqlstore.SessionArgs(tenant, id, node, now)
	if err != nil {
		return "", fmt.Errorf("claim session: %w", err)
	}
	if _, err := db.pool.Exec(ctx, sqlstore.ClaimSession, args...); err != nil {
		return "", fmt.Errorf("claim session %s: %w", id, err)
	}
	return db.SessionOwner(ctx, tenant, id)
}

// SessionOwner implements store.Store.
func (db *DB) SessionOwner(ctx context.Context, tenant, id string) (_ string, err error) {
	defer unavailable(&err)
	if !sqlstore.Text(tenant) || !sqlstore.Text(id) {
		return "", fmt.Errorf("session %q: %w", id, store.ErrNotFound)
	}
	var owner string
	err = db.pool.QueryRow(ctx, sqlstore.SessionOwner, tenant, id).Scan(&owner)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("session %s: %w", id, err)
	}
	return owner, nil
}

// ReleaseSession implements store.Store.
func (db *DB) ReleaseSession(ctx context.Context, tenant, id, node string) (err error) {
	defer unavailable(&err)
	if !sqlstore.Text(tenant) || !sqlstore.Text(id) || !sqlstore.Text(node) {
		return nil
	}
	if _, err := db.pool.Exec(ctx, sqlstore.ReleaseSession, tenant, id, node); err != nil {
		return fmt.Errorf("release session %s: %w", id, err)
	}
	return nil
}

// MoveSession implements store.Store.
func (db *DB) MoveSession(ctx context.Context, tenant, id, from, to string) (_ string, err error) {
	defer unavailable(&err)
	if _, err := sqlstore.SessionArgs(tenant, id, to, time.Time{}); err != nil {
		return "", fmt.Errorf("move session: %w", err)
	}
	if !sqlstore.Text(from) {
		return db.SessionOwner(ctx, tenant, id)
	}
	if _, err := db.pool.Exec(ctx, sqlstore.MoveSession, tenant, id, from, to); err != nil {
		return "", fmt.Errorf("move session %s: %w", id, err)
	}
	return db.SessionOwner(ctx, tenant, id)
}

// NodeSessions implements store.Store.
func (db *DB) NodeSessions(ctx context.Context, node string) (_ []store.SessionRef, err error) {
	defer unavailable(&err)
	if !sqlstore.Text(node) {
		return nil, nil
	}
	rows, _ := db.pool.Query(ctx, sqlstore.NodeSessions, node) // CollectRows reports the error
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SessionRef, error) {
		var s store.SessionRef
		err := r.Scan(&s.Tenant, &s.ID)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sessions of node %s: %w", node, err)
	}
	return out, nil
}

// SetSessionInfo implements store.Store.
func (db *DB) SetSessionInfo(ctx context.Context, tenant, id, node string, info []byte) (err error) {
	defer unavailable(&err)
	args, err := sqlstore.SessionInfoArgs(tenant, id, node, info)
	if err != nil {
		return fmt.Errorf("describe session: %w", err)
	}
	tag, err := db.pool.Exec(ctx, sqlstore.SetSessionInfo, args...)
	if err != nil {
		return fmt.Errorf("describe session %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("describe session %s of node %s: %w", id, node, store.ErrNotFound)
	}
	return nil
}

// ListSessions implements store.Store.
func (db *DB) ListSessions(ctx context.Context, tenant string) (_ []store.SessionInfo, err error) {
	defer unavailable(&err)
	if !sqlstore.Text(tenant) {
		return nil, nil
	}
	rows, _ := db.pool.Query(ctx, sqlstore.ListSessions, tenant) // CollectRows reports the error
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.SessionInfo, error) {
		var s store.SessionInfo
		var info string
		err := r.Scan(&s.Tenant, &s.ID, &s.Node, &info)
		s.Info = []byte(info)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sessions of tenant %s: %w", tenant, err)
	}
	return out, nil
}
