package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlstore"
)

// ClaimExecution implements store.Store. The claim is one IMMEDIATE
// transaction on the single write connection, so no two claimers (of this
// process or another on the same file) take the same execution.
//
// A read on a read-only connection comes first: with nothing queued for
// node (what a node that just took the last execution finds, every time)
// there is no claim, and no write lock to take. It cannot miss work: WAL
// shows a read every transaction committed before it began, and the
// submitter wakes claimers after its insert committed.
func (db *DB) ClaimExecution(ctx context.Context, node string, now time.Time) (*store.Execution, error) {
	if node == "" || !sqlstore.Text(node) {
		return nil, fmt.Errorf("claim execution: node %q: %w", node, store.ErrInvalid)
	}
	var id string
	err := db.r.QueryRowContext(ctx, sqlstore.NextQueued, node).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("claim execution: %w", store.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("claim execution: %w", err)
	}
	db.w.keep(ctx, sqlstore.ClaimNext(false), sqlstore.ClaimExecution)
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("claim execution: %w", err)
	}
	defer tx.Rollback()
	e, err := sqlstore.ScanExecution(tx.QueryRowContext(ctx, sqlstore.ClaimNext(false), node).Scan)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("claim execution: %w", store.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("claim execution: %w", err)
	}
	row, err := sqlstore.NewRow(sqlstore.Claimed(e, node, now))
	if err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", e.ID, err)
	}
	st := row.Claim()
	if _, err := tx.ExecContext(ctx, st.SQL, st.Args...); err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", e.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("claim execution %s: %w", e.ID, err)
	}
	return row.Execution, nil
}

// CountQueued implements store.Store.
func (db *DB) CountQueued(ctx context.Context) (int, error) {
	var n int
	if err := db.r.QueryRowContext(ctx, sqlstore.CountQueued).Scan(&n); err != nil {
		return 0, fmt.Errorf("count queued executions: %w", err)
	}
	return n, nil
}

// RequestCancel implements store.Store.
func (db *DB) RequestCancel(ctx context.Context, tenant, id string) error {
	if !sqlstore.Text(tenant) || !sqlstore.Text(id) {
		return fmt.Errorf("cancel execution %q: %w", id, store.ErrNotFound)
	}
	res, err := db.w.ExecContext(ctx, sqlstore.RequestCancel, tenant, id)
	if err != nil {
		return fmt.Errorf("cancel execution %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("cancel execution %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("cancel execution %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// NodeExecutions implements store.Store.
func (db *DB) NodeExecutions(ctx context.Context, node string) ([]*store.Execution, error) {
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
func (db *DB) Beat(ctx context.Context, n store.Node) error {
	args, err := sqlstore.NodeArgs(n)
	if err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	if _, err := db.w.ExecContext(ctx, sqlstore.BeatNode, args...); err != nil {
		return fmt.Errorf("node heartbeat %s: %w", n.ID, err)
	}
	return nil
}

// Nodes implements store.Store.
func (db *DB) Nodes(ctx context.Context) ([]store.Node, error) {
	var out []store.Node
	err := db.each(ctx, sqlstore.ListNodes, nil, func(scan func(dest ...any) error) error {
		n, err := sqlstore.ScanNode(scan)
		if err != nil {
			return err
		}
		out = append(out, n)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// ForgetNode implements store.Store.
func (db *DB) ForgetNode(ctx context.Context, id string, seenBefore time.Time) error {
	if _, err := db.w.ExecContext(ctx, sqlstore.ForgetNode, id, sqlstore.Micros(seenBefore)); err != nil {
		return fmt.Errorf("forget node %s: %w", id, err)
	}
	return nil
}

// ClaimSession implements store.Store.
func (db *DB) ClaimSession(ctx context.Context, tenant, id, node string, now time.Time) (string, error) {
	args, err := sqlstore.SessionArgs(tenant, id, node, now)
	if err != nil {
		return "", fmt.Errorf("claim session: %w", err)
	}
	if _, err := db.w.ExecContext(ctx, sqlstore.ClaimSession, args...); err != nil {
		return "", fmt.Errorf("claim session %s: %w", id, err)
	}
	// The write connection: a read connection may not see the insert yet.
	var owner string
	if err := db.w.QueryRowContext(ctx, sqlstore.SessionOwner, tenant, id).Scan(&owner); err != nil {
		return "", fmt.Errorf("claim session %s: %w", id, err)
	}
	return owner, nil
}

// SessionOwner implements store.Store.
func (db *DB) SessionOwner(ctx context.Context, tenant, id string) (string, error) {
	if !sqlstore.Text(tenant) || !sqlstore.Text(id) {
		return "", fmt.Errorf("session %q: %w", id, store.ErrNotFound)
	}
	var owner string
	err := db.r.QueryRowContext(ctx, sqlstore.SessionOwner, tenant, id).Scan(&owner)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	case err != nil:
		return "", fmt.Errorf("session %s: %w", id, err)
	}
	return owner, nil
}

// ReleaseSession implements store.Store.
func (db *DB) ReleaseSession(ctx context.Context, tenant, id, node string) error {
	if _, err := db.w.ExecContext(ctx, sqlstore.ReleaseSession, tenant, id, node); err != nil {
		return fmt.Errorf("release session %s: %w", id, err)
	}
	return nil
}

// MoveSession implements store.Store.
func (db *DB) MoveSession(ctx context.Context, tenant, id, from, to string) (string, error) {
	if _, err := sqlstore.SessionArgs(tenant, id, to, time.Time{}); err != nil {
		return "", fmt.Errorf("move session: %w", err)
	}
	if _, err := db.w.ExecContext(ctx, sqlstore.MoveSession, tenant, id, from, to); err != nil {
		return "", fmt.Errorf("move session %s: %w", id, err)
	}
	return db.SessionOwner(ctx, tenant, id)
}

// NodeSessions implements store.Store.
func (db *DB) NodeSessions(ctx context.Context, node string) ([]store.SessionRef, error) {
	var out []store.SessionRef
	err := db.each(ctx, sqlstore.NodeSessions, []any{node}, func(scan func(dest ...any) error) error {
		var s store.SessionRef
		if err := scan(&s.Tenant, &s.ID); err != nil {
			return err
		}
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sessions of node %s: %w", node, err)
	}
	return out, nil
}

// SetSessionInfo implements store.Store.
func (db *DB) SetSessionInfo(ctx context.Context, tenant, id, node string, info []byte) error {
	args, err := sqlstore.SessionInfoArgs(tenant, id, node, info)
	if err != nil {
		return fmt.Errorf("describe session: %w", err)
	}
	res, err := db.w.ExecContext(ctx, sqlstore.SetSessionInfo, args...)
	if err != nil {
		return fmt.Errorf("describe session %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("describe session %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("describe session %s of node %s: %w", id, node, store.ErrNotFound)
	}
	return nil
}

// ListSessions implements store.Store.
func (db *DB) ListSessions(ctx context.Context, tenant string) ([]store.SessionInfo, error) {
	if !sqlstore.Text(tenant) {
		return nil, nil
	}
	var out []store.SessionInfo
	err := db.each(ctx, sqlstore.ListSessions, []any{tenant}, func(scan func(dest ...any) error) error {
		var s store.SessionInfo
		var info string
		if err := scan(&s.Tenant, &s.ID, &s.Node, &info); err != nil {
			return err
		}
		s.Info = []byte(info)
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sessions of tenant %s: %w", tenant, err)
	}
	return out, nil
}
