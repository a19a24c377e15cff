// Package sqlite is the embedded store: one SQLite file in WAL mode, on
// the pure-Go modernc.org/sqlite driver. Writes go through a single
// connection, so writers of one process queue in Go instead of failing
// with SQLITE_BUSY; reads use a pool of read-only connections that WAL
// lets run beside the writer. Another process on the same file (a second
// `corral serve`, a migration at start-up) is waited for with
// busy_timeout, and transactions begin IMMEDIATE so that waiting is all it
// takes.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	msqlite "modernc.org/sqlite" // also registers the "sqlite" driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/migrations"
	"github.com/corralhq/corral/internal/store/sqlstore"
	"github.com/corralhq/corral/sandbox"
)

// busyTimeout is how long a statement waits for another process's write
// lock before it fails.
const busyTimeout = 30 * time.Second

// DB is a store.Store in one SQLite file. It is safe for concurrent use.
type DB struct {
	w *pool // the one write connection
	r *pool // read-only connections
}

// Open opens (creating it and its directory if needed) the database at
// dsn — "sqlite:///abs/path.db", "sqlite:rel/path.db" or a bare path — and
// brings its schema up to date.
func Open(ctx context.Context, dsn string) (*DB, error) {
	path, err := filePath(dsn)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	uri := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()),
			"journal_mode(WAL)",
			// In WAL mode NORMAL loses no committed transaction when the
			// process dies, only (at worst) the last ones on power loss.
			"synchronous(NORMAL)",
			"foreign_keys(1)",
		},
		"_txlock": {"immediate"},
	}.Encode()
	wdb, err := sql.Open("sqlite", uri)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	w := newPool(wdb)
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	db := &DB{w: w}
	if err := db.migrateRetrying(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	rdb, err := sql.Open("sqlite", uri+"&_query_only=1")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	r := newPool(rdb)
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	db.r = r
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return db, nil
}

// filePath returns the file a DSN names.
func filePath(dsn string) (string, error) {
	p := dsn
	if rest, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("sqlite url %q: %w", dsn, err)
		}
		if u.RawQuery != "" || u.Fragment != "" {
			return "", fmt.Errorf("sqlite url %q: parameters are not supported", dsn)
		}
		switch {
		case u.Opaque != "": // sqlite:rel/path.db
			p, err = url.PathUnescape(u.Opaque)
		case strings.HasPrefix(rest, "//"): // sqlite:///abs or sqlite://rel/path
			p = u.Host + u.Path
		default:
			p = u.Path
		}
		if err != nil {
			return "", fmt.Errorf("sqlite url %q: %w", dsn, err)
		}
	}
	if p == "" || strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("sqlite url %q: no file path", dsn)
	}
	return p, nil
}

// migrateRetrying migrates, trying again while the database is busy. Two
// stores opening a new file at the same moment race to switch it to WAL,
// and the loser's switch fails with SQLITE_BUSY at once, without waiting
// in the busy handler; its next connection finds the file in WAL mode.
func (db *DB) migrateRetrying(ctx context.Context) error {
	deadline := time.Now().Add(busyTimeout)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		err := db.migrate(ctx)
		var se *msqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migrate: %w", ctx.Err())
		case <-time.After(pause + rand.N(pause)):
		}
	}
}

// migrate applies pending migrations in one IMMEDIATE transaction: a second
// process starting at the same time waits for the write lock, then finds
// nothing left to do.
func (db *DB) migrate(ctx context.Context) error {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, migrations.CreateVersionTable); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	rows, err := tx.QueryContext(ctx, migrations.SelectVersions)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var applied []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("migrate: %w", err)
		}
		applied = append(applied, v)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	pending, err := migrations.Pending(applied)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range pending {
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, migrations.InsertVersion, m.Version, m.Name, sqlstore.Micros(time.Now())); err != nil {
			return fmt.Errorf("migrate %s: %w", m.Name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// CreateExecution implements store.Store.
func (db *DB) CreateExecution(ctx context.Context, e *store.Execution) (*store.Execution, bool, error) {
	row, err := sqlstore.NewRow(e)
	if err != nil {
		return nil, false, fmt.Errorf("create execution: %w", err)
	}
	res, err := db.w.ExecContext(ctx, sqlstore.InsertExecution, row.InsertArgs()...)
	if err != nil {
		return nil, false, fmt.Errorf("create execution %s: %w", e.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, false, fmt.Errorf("create execution %s: %w", e.ID, err)
	} else if n == 1 {
		return row.Execution, true, nil
	}
	got, err := db.GetExecution(ctx, e.Tenant, e.ID)
	if err != nil {
		return nil, false, fmt.Errorf("create execution %s: existing: %w", e.ID, err)
	}
	return got, false, nil
}

// UpdateExecution implements store.Store.
func (db *DB) UpdateExecution(ctx context.Context, e *store.Execution, from ...sandbox.Status) error {
	_, err := db.FinishExecution(ctx, e, nil, from...)
	return err
}

// FinishExecution implements store.Store.
func (db *DB) FinishExecution(ctx context.Context, e *store.Execution, deliveries []store.Delivery, from ...sandbox.Status) (*sandbox.Result, error) {
	row, err := sqlstore.NewRow(e)
	if err != nil {
		return nil, fmt.Errorf("update execution: %w", err)
	}
	ds, err := sqlstore.DeliveryArgs(row.Execution, deliveries)
	if err != nil {
		return nil, fmt.Errorf("update execution %s: %w", e.ID, err)
	}
	narrow, full := row.Update(from)
	db.w.keep(ctx, narrow.SQL, full.SQL, sqlstore.ExecutionStatus)
	if len(ds) > 0 {
		db.w.keep(ctx, sqlstore.InsertDelivery)
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("update execution %s: %w", e.ID, err)
	}
	defer tx.Rollback()
	n, err := execCount(ctx, tx, narrow)
	if err == nil && n == 0 {
		n, err = execCount(ctx, tx, full)
	}
	if err != nil {
		return nil, fmt.Errorf("update execution %s: %w", e.ID, err)
	}
	if n == 0 {
		var status string
		err := tx.QueryRowContext(ctx, sqlstore.ExecutionStatus, e.Tenant, e.ID).Scan(&status)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("update execution %s: %w", e.ID, store.ErrNotFound)
		case err != nil:
			return nil, fmt.Errorf("update execution %s: %w", e.ID, err)
		}
		return nil, fmt.Errorf("update execution %s: status %s, want one of %v: %w", e.ID, status, from, store.ErrStale)
	}
	for _, d := range ds {
		if _, err := tx.ExecContext(ctx, sqlstore.InsertDelivery, d...); err != nil {
			return nil, fmt.Errorf("update execution %s: insert delivery %v: %w", e.ID, d[0], err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("update execution %s: %w", e.ID, err)
	}
	return &row.Execution.Record, nil
}

// execCount runs st in tx and returns how many rows it changed.
func execCount(ctx context.Context, tx *tx, st sqlstore.Statement) (int64, error) {
	res, err := tx.ExecContext(ctx, st.SQL, st.Args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// GetExecution implements store.Store.
func (db *DB) GetExecution(ctx context.Context, tenant, id string) (*store.Execution, error) {
	if !sqlstore.Text(tenant) || !sqlstore.Text(id) {
		return nil, fmt.Errorf("get execution %q: %w", id, store.ErrNotFound)
	}
	e, err := sqlstore.ScanExecution(db.r.QueryRowContext(ctx, sqlstore.GetExecution, tenant, id).Scan)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("get execution %s: %w", id, store.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("get execution %s: %w", id, err)
	}
	return e, nil
}

// ListExecutions implements store.Store.
func (db *DB) ListExecutions(ctx context.Context, tenant string, q store.Query) ([]*store.Execution, string, error) {
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
func (db *DB) ExecutionsInStatus(ctx context.Context, status sandbox.Status, before time.Time, limit int) ([]*store.Execution, error) {
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
	rows, err := db.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Execution
	for rows.Next() {
		e, err := sqlstore.ScanExecution(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// CountExecutions implements store.Store.
func (db *DB) CountExecutions(ctx context.Context, tenant string) (int64, error) {
	var n int64
	var err error
	if tenant == "" {
		err = db.r.QueryRowContext(ctx, sqlstore.CountAll).Scan(&n)
	} else {
		err = db.r.QueryRowContext(ctx, sqlstore.CountTenant, tenant).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("count executions: %w", err)
	}
	return n, nil
}

// ExecutionStats implements store.Store.
func (db *DB) ExecutionStats(ctx context.Context, tenant string, since, until time.Time) (*store.Stats, error) {
	return sqlstore.ExecutionStats(ctx, db.each, tenant, since, until)
}

// each implements sqlstore.EachRow on the read connections.
func (db *DB) each(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := db.r.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	return sqlstore.Each(rows, row)
}

// ClaimDeliveries implements store.Store. The single write connection
// serializes claims, so no two claimers lease the same delivery.
func (db *DB) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.Delivery, error) {
	args, err := sqlstore.ClaimArgs(now, lease, limit)
	if err != nil {
		return nil, err
	}
	ds, err := db.deliveries(ctx, db.w, sqlstore.ClaimDeliveries(false), args...)
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	sqlstore.SortClaimed(ds)
	return ds, nil
}

// UpdateDelivery implements store.Store.
func (db *DB) UpdateDelivery(ctx context.Context, d store.Delivery) error {
	args, err := sqlstore.UpdateDeliveryArgs(d)
	if err != nil {
		return fmt.Errorf("update delivery: %w", err)
	}
	res, err := db.w.ExecContext(ctx, sqlstore.UpdateDelivery, args...)
	if err != nil {
		return fmt.Errorf("update delivery %s: %w", d.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update delivery %s: %w", d.ID, err)
	} else if n == 0 {
		return fmt.Errorf("update delivery %s: %w", d.ID, store.ErrNotFound)
	}
	return nil
}

// Deliveries implements store.Store.
func (db *DB) Deliveries(ctx context.Context, tenant, executionID string) ([]store.Delivery, error) {
	if !sqlstore.Text(tenant) || !sqlstore.Text(executionID) {
		return nil, nil
	}
	ds, err := db.deliveries(ctx, db.r, sqlstore.ListDeliveries, tenant, executionID)
	if err != nil {
		return nil, fmt.Errorf("deliveries of %s: %w", executionID, err)
	}
	return ds, nil
}

func (db *DB) deliveries(ctx context.Context, on *pool, query string, args ...any) ([]store.Delivery, error) {
	rows, err := on.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Delivery
	for rows.Next() {
		d, err := sqlstore.ScanDelivery(rows.Scan)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// AddEgress implements store.Store.
func (db *DB) AddEgress(ctx context.Context, tenant, executionID string, attempts []sandbox.EgressAttempt) error {
	if len(attempts) == 0 {
		return nil
	}
	db.w.keep(ctx, sqlstore.NextEgressSeq, sqlstore.InsertEgress)
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add egress: %w", err)
	}
	defer tx.Rollback()
	var last int
	if err := tx.QueryRowContext(ctx, sqlstore.NextEgressSeq, tenant, executionID).Scan(&last); err != nil {
		return fmt.Errorf("add egress: %w", err)
	}
	rows, err := sqlstore.EgressArgs(tenant, executionID, last+1, attempts)
	if err != nil {
		return fmt.Errorf("add egress: %w", err)
	}
	for _, args := range rows {
		if _, err := tx.ExecContext(ctx, sqlstore.InsertEgress, args...); err != nil {
			return fmt.Errorf("add egress: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add egress: %w", err)
	}
	return nil
}

// Egress implements store.Store.
func (db *DB) Egress(ctx context.Context, tenant, executionID string) ([]sandbox.EgressAttempt, error) {
	rows, err := db.r.QueryContext(ctx, sqlstore.ListEgress, tenant, executionID)
	if err != nil {
		return nil, fmt.Errorf("egress of %s: %w", executionID, err)
	}
	defer rows.Close()
	var out []sandbox.EgressAttempt
	for rows.Next() {
		a, err := sqlstore.ScanEgress(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("egress of %s: %w", executionID, err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("egress of %s: %w", executionID, err)
	}
	return out, nil
}

// Ping implements store.Store.
func (db *DB) Ping(ctx context.Context) error {
	if err := errors.Join(db.w.PingContext(ctx), db.r.PingContext(ctx)); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	return nil
}

// Close implements store.Store.
func (db *DB) Close() error {
	var err error
	if db.r != nil {
		err = db.r.Close()
	}
	return errors.Join(err, db.w.Close())
}

// Interface guards.
var _ store.Store = (*DB)(nil)
