// Package postgres is the store that several corral nodes share: PostgreSQL
// through a pgx connection pool. Conditional updates are single statements
// (or one transaction with the deliveries they bring), deliveries are
// claimed with FOR UPDATE SKIP LOCKED so that nodes never lease the same
// one, and migrations run under an advisory lock so that nodes starting
// together apply them once.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/migrations"
	"github.com/corralhq/corral/internal/store/sqlstore"
	"github.com/corralhq/corral/sandbox"
)

// migrationLock is the advisory lock key ("corral" in ASCII) held while
// migrating. Advisory locks are per database, so stores in other databases
// of the same server do not wait for each other.
const migrationLock int64 = 0x636f7272616c

// DB is a store.Store in a PostgreSQL database. It is safe for concurrent
// use, by any number of processes.
type DB struct {
	pool *pgxpool.Pool
}

// Open connects to the database at url ("postgres://user:pass@host/db";
// pgxpool's parameters such as pool_max_conns apply) and brings its schema
// up to date.
func Open(ctx context.Context, url string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The error may quote the URL, password included.
		return nil, errors.New("open postgres: invalid url")
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres %s/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	db := &DB{pool: pool}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	return db, nil
}

// migrate applies pending migrations in one transaction under the
// migration lock; PostgreSQL's DDL is transactional, so a failed migration
// leaves nothing behind.
func (db *DB) migrate(ctx context.Context) error {
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, migrations.CreateVersionTable); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		rows, _ := tx.Query(ctx, migrations.SelectVersions)
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		pending, err := migrations.Pending(applied)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		for _, m := range pending {
			// Without arguments pgx uses the simple protocol, which runs
			// a file of several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migrate %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, migrations.InsertVersion, m.Version, m.Name, sqlstore.Micros(time.Now())); err != nil {
				return fmt.Errorf("migrate %s: %w", m.Name, err)
			}
		}
		return nil
	})
}

// CreateExecution implements store.Store.
func (db *DB) CreateExecution(ctx context.Context, e *store.Execution) (_ *store.Execution, _ bool, err error) {
	defer unavailable(&err)
	row, err := sqlstore.NewRow(e)
	if err != nil {
		return nil, false, fmt.Errorf("create execution: %w", err)
	}
	// A concurrent insert of the same id makes ON CONFLICT wait for it to
	// commit, so the SELECT below finds the row.
	tag, err := db.pool.Exec(ctx, sqlstore.InsertExecution, row.InsertArgs()...)
	if err != nil {
		return nil, false, fmt.Errorf("create execution %s: %w", e.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return row.Execution, true, nil
	}
	got, err := db.GetExecution(ctx, e.Tenant, e.ID)
	if err != nil {
		return nil, false, fmt.Errorf("create execution %s: existing: %w", e.ID, err)
	}
	return got, false, nil
}

// UpdateExecution implements store.Store.
func (db *DB) UpdateExecution(ctx context.Context, e *store.Execution, from ...sandbox.Status) (err error) {
	defer unavailable(&err)
	_, err = db.FinishExecution(ctx, e, nil, from...)
	return err
}

// FinishExecution implements store.Store. It sets every column (the full
// statement of sqlstore.Row.Update): PostgreSQL writes a new entry in every
// index once status changes, however few columns the statement sets.
func (db *DB) FinishExecution(ctx context.Context, e *store.Execution, deliveries []store.Delivery, from ...sandbox.Status) (_ *sandbox.Result, err error) {
	defer unavailable(&err)
	row, err := sqlstore.NewRow(e)
	if err != nil {
		return nil, fmt.Errorf("update execution: %w", err)
	}
	ds, err := sqlstore.DeliveryArgs(row.Execution, deliveries)
	if err != nil {
		return nil, fmt.Errorf("update execution %s: %w", e.ID, err)
	}
	_, full := row.Update(from)
	if len(ds) == 0 {
		// One statement is atomic on its own.
		tag, err := db.pool.Exec(ctx, full.SQL, full.Args...)
		if err != nil {
			return nil, fmt.Errorf("update execution %s: %w", e.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil, db.whyNotUpdated(ctx, db.pool, e, from)
		}
		return &row.Execution.Record, nil
	}
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, full.SQL, full.Args...)
		if err != nil {
			return fmt.Errorf("update execution %s: %w", e.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return db.whyNotUpdated(ctx, tx, e, from)
		}
		b := &pgx.Batch{}
		for _, d := range ds {
			b.Queue(sqlstore.InsertDelivery, d...)
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("update execution %s: insert deliveries: %w", e.ID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &row.Execution.Record, nil
}

// querier is what a pool and a transaction both offer.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// whyNotUpdated tells an absent execution from one in another status.
func (db *DB) whyNotUpdated(ctx context.Context, q querier, e *store.Execution, from []sandbox.Status) error {
	var status string
	err := q.QueryRow(ctx, sqlstore.ExecutionStatus, e.Tenant, e.ID).Scan(&status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("update execution %s: %w", e.ID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("update execution %s: %w", e.ID, err)
	}
	return fmt.Errorf("update execution %s: status %s, want one of %v: %w", e.ID, status, from, store.ErrStale)
}

// GetExecution implements store.Store.
func (db *DB) GetExecution(ctx context.Context, tenant, id string) (_ *store.Execution, err error) {
	defer unavailable(&err)
	if !sqlstore.Text(tenant) || !sqlstore.Text(id) {
		return nil, fmt.Errorf("get execution %q: %w", id, store.ErrNotFound)
	}
	e, err := sqlstore.ScanExecution(db.pool.QueryRow(ctx, sqlstore.GetExecution, tenant, id).Scan)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("get execution %s: %w", id, store.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("get execution %s: %w", id, err)
	}
	return e, nil
}

// ListExecutions implements store.Store.
func (db *DB) ListExecutions(ctx context.Context, tenant string, q store.Query) (_ []*store.Execution, _ string, err error) {
	defer unavailable(&err)
	l, err := sqlstore.NewList(tenant, q)
	if err != nil {
		return nil, "", fmt.Errorf("list executions: %w", err)
	}
	es, err := db.executions(ctx, l.SQL, l.Args...)
	if err != nil {
		return nil, "", fmt.Errorf("list executions: %w", err)
	}
	es, next := l.Page(es)
	return es, next, nil
}

// ExecutionsInStatus implements store.Store.
func (db *DB) ExecutionsInStatus(ctx context.Context, status sandbox.Status, before time.Time, limit int) (_ []*store.Execution, err error) {
	defer unavailable(&err)
	if limit <= 0 {
		return nil, fmt.Errorf("executions in status %s: limit %d must be positive", status, limit)
	}
	es, err := db.executions(ctx, sqlstore.ExecutionsInStatus, string(status), sqlstore.Micros(before), int64(limit))
	if err != nil {
		return nil, fmt.Errorf("executions in status %s: %w", status, err)
	}
	return es, nil
}

func (db *DB) executions(ctx context.Context, query string, args ...any) ([]*store.Execution, error) {
	rows, _ := db.pool.Query(ctx, query, args...) // CollectRows reports the error
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Execution, error) {
		return sqlstore.ScanExecution(r.Scan)
	})
}

// CountExecutions implements store.Store.
func (db *DB) CountExecutions(ctx context.Context, tenant string) (_ int64, err error) {
	defer unavailable(&err)
	var n int64
	if tenant == "" {
		err = db.pool.QueryRow(ctx, sqlstore.CountAll).Scan(&n)
	} else {
		err = db.pool.QueryRow(ctx, sqlstore.CountTenant, tenant).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("count executions: %w", err)
	}
	return n, nil
}

// ExecutionStats implements store.Store.
func (db *DB) ExecutionStats(ctx context.Context, tenant string, since, until time.Time) (_ *store.Stats, err error) {
	defer unavailable(&err)
	return sqlstore.ExecutionStats(ctx, db.each, tenant, since, until)
}

// each implements sqlstore.EachRow on the pool.
func (db *DB) each(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.Each(rows, row)
}

// ClaimDeliveries implements store.Store. Rows another node is claiming
// are skipped, and a row it claimed meanwhile no longer qualifies when
// PostgreSQL re-checks the condition on the locked row.
func (db *DB) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) (_ []store.Delivery, err error) {
	defer unavailable(&err)
	args, err := sqlstore.ClaimArgs(now, lease, limit)
	if err != nil {
		return nil, err
	}
	ds, err := db.deliveries(ctx, sqlstore.ClaimDeliveries(true), args...)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	sqlstore.SortClaimed(ds)
	return ds, nil
}

// UpdateDelivery implements store.Store.
func (db *DB) UpdateDelivery(ctx context.Context, d store.Delivery) (err error) {
	defer unavailable(&err)
	args, err := sqlstore.UpdateDeliveryArgs(d)
	if err != nil {
		return fmt.Errorf("update delivery: %w", err)
	}
	tag, err := db.pool.Exec(ctx, sqlstore.UpdateDelivery, args...)
	if err != nil {
		return fmt.Errorf("update delivery %s: %w", d.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update delivery %s: %w", d.ID, store.ErrNotFound)
	}
	return nil
}

// Deliveries implements store.Store.
func (db *DB) Deliveries(ctx context.Context, tenant, executionID string) (_ []store.Delivery, err error) {
	defer unavailable(&err)
	if !sqlstore.Text(tenant) || !sqlstore.Text(executionID) {
		return nil, nil
	}
	ds, err := db.deliveries(ctx, sqlstore.ListDeliveries, tenant, executionID)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", executionID, err)
	}
	return ds, nil
}

func (db *DB) deliveries(ctx context.Context, query string, args ...any) ([]store.Delivery, error) {
	rows, _ := db.pool.Query(ctx, query, args...) // CollectRows reports the error
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Delivery, error) {
		return sqlstore.ScanDelivery(r.Scan)
	})
}

// AddEgress implements store.Store.
func (db *DB) AddEgress(ctx context.Context, tenant, executionID string, attempts []sandbox.EgressAttempt) (err error) {
	defer unavailable(&err)
	if len(attempts) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		// Serialise numbering per execution.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1 || '/' || $2))`, tenant, executionID); err != nil {
			return fmt.Errorf("add egress: %w", err)
		}
		var last int64
		if err := tx.QueryRow(ctx, sqlstore.NextEgressSeq, tenant, executionID).Scan(&last); err != nil {
			return fmt.Errorf("add egress: %w", err)
		}
		rows, err := sqlstore.EgressArgs(tenant, executionID, int(last)+1, attempts)
		if err != nil {
			return fmt.Errorf("add egress: %w", err)
		}
		for _, args := range rows {
			if _, err := tx.Exec(ctx, sqlstore.InsertEgress, args...); err != nil {
				return fmt.Errorf("add egress: %w", err)
			}
		}
		return nil
	})
}

// Egress implements store.Store.
func (db *DB) Egress(ctx context.Context, tenant, executionID string) (_ []sandbox.EgressAttempt, err error) {
	defer unavailable(&err)
	rows, _ := db.pool.Query(ctx, sqlstore.ListEgress, tenant, executionID)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandbox.EgressAttempt, error) {
		return sqlstore.ScanEgress(r.Scan)
	})
	if err != nil {
		return nil, fmt.Errorf("egress of %s: %w", executionID, err)
	}
	return out, nil
}

// Ping implements store.Store.
func (db *DB) Ping(ctx context.Context) (err error) {
	defer unavailable(&err)
	if err := db.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// Close implements store.Store. It waits for connections in use to be
// released.
func (db *DB) Close() error {
	db.pool.Close()
	return nil
}

// Interface guards.
var _ store.Store = (*DB)(nil)

// unavailable marks *err with store.ErrUnavailable when it says the
// database could not be reached or is going away (a restart, a failover):
// what the caller may retry after a pause. A query the server refused for
// its content is not marked.
func unavailable(err *error) {
	if *err == nil || errors.Is(*err, store.ErrUnavailable) {
		return
	}
	var pe *pgconn.PgError
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.As(*err, &pe):
		// Class 08: connection exception; 57P01-03: the server shuts down
		// or is starting; 53300: too many connections.
		if !strings.HasPrefix(pe.Code, "08") && pe.Code != "57P01" && pe.Code != "57P02" &&
			pe.Code != "57P03" && pe.Code != "53300" {
			return
		}
	case errors.As(*err, &ce), errors.As(*err, &ne), errors.Is(*err, io.ErrUnexpectedEOF),
		errors.Is(*err, io.EOF), errors.Is(*err, syscall.ECONNREFUSED), errors.Is(*err, syscall.ECONNRESET),
		pgconn.SafeToRetry(*err):
	default:
		return
	}
	*err = fmt.Errorf("%w: %w", store.ErrUnavailable, *err)
}
