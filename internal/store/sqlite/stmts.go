package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
)

// maxStmts bounds how many statements one pool keeps prepared. The store
// runs a few dozen fixed statements; list queries are built from a query's
// filters, and past the bound a statement is prepared for its one use,
// as every statement was before the cache.
const maxStmts = 128

// pool is a *sql.DB whose statements are prepared once and kept. SQLite
// parses and plans a statement when it is prepared, and database/sql
// prepares (and finalizes) one on every Exec or Query of a plain string:
// that was about a third of the store's CPU per execution. A kept
// statement is prepared once on each connection that runs it; SQLite
// prepares it again by itself if the schema changes under it.
type pool struct {
	*sql.DB
	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func newPool(db *sql.DB) *pool { return &pool{DB: db, stmts: map[string]*sql.Stmt{}} }

// stmt returns the kept statement of query, preparing it the first time;
// nil (run query unprepared) when the pool keeps maxStmts already or the
// preparation failed: running query then reports why. It takes a
// connection of the pool to prepare on, so it must not be called while a
// transaction holds the write pool's one connection: a transaction runs
// only what keep prepared before it began.
func (p *pool) stmt(ctx context.Context, query string) *sql.Stmt {
	p.mu.Lock()
	s, ok := p.stmts[query]
	full := len(p.stmts) >= maxStmts
	p.mu.Unlock()
	if ok || full {
		return s
	}
	// Prepared without the lock: preparing waits for a connection, which
	// a transaction may hold while it looks up its statements (kept).
	s, err := p.DB.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if had, ok := p.stmts[query]; ok || len(p.stmts) >= maxStmts {
		s.Close() // another caller's came first, or the room is taken
		return had
	}
	p.stmts[query] = s
	return s
}

// keep prepares queries, which a transaction about to begin runs, if they
// are not kept yet.
func (p *pool) keep(ctx context.Context, queries ...string) {
	for _, q := range queries {
		p.stmt(ctx, q)
	}
}

// kept returns the kept statement of query, or nil.
func (p *pool) kept(query string) *sql.Stmt {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stmts[query]
}

// ExecContext is sql.DB's, on the kept statement.
func (p *pool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := p.stmt(ctx, query); s != nil {
		return s.ExecContext(ctx, args...)
	}
	return p.DB.ExecContext(ctx, query, args...)
}

// QueryContext is sql.DB's, on the kept statement.
func (p *pool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := p.stmt(ctx, query); s != nil {
		return s.QueryContext(ctx, args...)
	}
	return p.DB.QueryContext(ctx, query, args...)
}

// QueryRowContext is sql.DB's, on the kept statement.
func (p *pool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := p.stmt(ctx, query); s != nil {
		return s.QueryRowContext(ctx, args...)
	}
	return p.DB.QueryRowContext(ctx, query, args...)
}

// BeginTx is sql.DB's; the transaction runs the pool's kept statements.
func (p *pool) BeginTx(ctx context.Context, opts *sql.TxOptions) (*tx, error) {
	t, err := p.DB.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &tx{Tx: t, p: p}, nil
}

// Close closes the kept statements, then the pool.
func (p *pool) Close() error {
	p.mu.Lock()
	var errs []error
	for q, s := range p.stmts {
		errs = append(errs, s.Close())
		delete(p.stmts, q)
	}
	p.mu.Unlock()
	return errors.Join(append(errs, p.DB.Close())...)
}

// tx is a transaction of a pool. A statement the pool keeps (see keep)
// runs in it on the transaction's connection, where it is prepared already
// after its first use there; others are prepared for their one use.
type tx struct {
	*sql.Tx
	p *pool
}

// ExecContext is sql.Tx's, on the pool's kept statement.
func (t *tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if s := t.p.kept(query); s != nil {
		return t.StmtContext(ctx, s).ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, query, args...)
}

// QueryContext is sql.Tx's, on the pool's kept statement.
func (t *tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if s := t.p.kept(query); s != nil {
		return t.StmtContext(ctx, s).QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, query, args...)
}

// QueryRowContext is sql.Tx's, on the pool's kept statement.
func (t *tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if s := t.p.kept(query); s != nil {
		return t.StmtContext(ctx, s).QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, query, args...)
}
