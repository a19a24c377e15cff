package sqlstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// EachRow runs a query and calls row with the scanner of each row it
// returns; each store implements it on its own connection.
type EachRow func(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error

// Rows is what pgx.Rows and *sql.Rows both offer to read a result.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Each calls row with the scanner of each of rows, for an EachRow; the
// caller closes rows.
func Each(rows Rows, row func(scan func(dest ...any) error) error) error {
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Statements of ExecutionStats. Each takes the tenant and the window as
// Micros(since), Micros(until); the window is on created_at, which the
// (tenant, created_at, id) index serves.
var (
	statsCounts = `SELECT status, error_type, tier, COUNT(*) FROM executions
WHERE tenant = $1 AND created_at >= $2 AND created_at < $3
GROUP BY status, error_type, tier`
	// A program that never ran has duration 0; /metrics does not observe
	// it either.
	statsDuration = rankedSQL("duration_ms", "duration_ms > 0")
	// A final record without a finish time (none should exist) would have
	// a negative latency: left out.
	statsLatency = rankedSQL("(finished_at - created_at) / 1000", "finished_at >= created_at")
)

// percents are the percentiles ExecutionStats reports.
var percents = []int64{50, 95, 99}

// rankedSQL numbers value over the window's final executions that meet
// cond, in ascending order, and returns (rank, count, value) of the rows at
// the nearest ranks of percents (store.Rank: ceil(p × n / 100), in integer
// arithmetic, which both databases truncate alike) and of the last row.
// Ties in value make the order among them arbitrary but not the value at
// a rank. Window functions are in SQLite since 3.25 and PostgreSQL since
// 8.4.
func rankedSQL(value, cond string) string {
	final := make([]string, 0, 3)
	for _, s := range []sandbox.Status{sandbox.StatusSuccess, sandbox.StatusFailed, sandbox.StatusCancelled} {
		final = append(final, "'"+string(s)+"'")
	}
	ranks := []string{"rn = n"}
	for _, p := range percents {
		ranks = append(ranks, fmt.Sprintf("rn = (%d * n + 99) / 100", p))
	}
	return `SELECT rn, n, v FROM (
    SELECT ` + value + ` AS v, ROW_NUMBER() OVER (ORDER BY ` + value + `) AS rn, COUNT(*) OVER () AS n
    FROM executions
    WHERE tenant = $1 AND created_at >= $2 AND created_at < $3
        AND status IN (` + strings.Join(final, ", ") + `) AND ` + cond + `
) ranked
WHERE ` + strings.Join(ranks, " OR ")
}

// ExecutionStats implements store.Store.ExecutionStats over each. Every
// figure is computed by one statement; the figures are not one snapshot,
// so an execution finishing meanwhile may count in one and not another.
func ExecutionStats(ctx context.Context, each EachRow, tenant string, since, until time.Time) (*store.Stats, error) {
	if !since.Before(until) {
		return nil, fmt.Errorf("execution stats: window [%v, %v) is empty: %w", since, until, store.ErrInvalid)
	}
	if err := checkText("tenant", tenant); err != nil {
		return nil, fmt.Errorf("execution stats: %w", err)
	}
	args := []any{tenant, Micros(normTime(since)), Micros(normTime(until))}
	st := &store.Stats{ByStatus: map[sandbox.Status]int64{}, ByErrorType: map[sandbox.ErrorType]int64{},
		ByTier: map[string]int64{}}
	err := each(ctx, statsCounts, args, func(scan func(...any) error) error {
		var status, errType, tier string
		var n int64
		if err := scan(&status, &errType, &tier, &n); err != nil {
			return err
		}
		st.Total += n
		st.ByStatus[sandbox.Status(status)] += n
		if !sandbox.Status(status).Final() {
			return nil
		}
		st.ByTier[tier] += n
		if errType != "" {
			st.ByErrorType[sandbox.ErrorType(errType)] += n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("execution stats: counts: %w", err)
	}
	for _, f := range []struct {
		name, query string
		dst         *store.Percentiles
	}{{"duration", statsDuration, &st.Duration}, {"latency", statsLatency, &st.Latency}} {
		ranked := map[int64]int64{} // rank → value
		err := each(ctx, f.query, args, func(scan func(...any) error) error {
			var rank, n, v int64
			if err := scan(&rank, &n, &v); err != nil {
				return err
			}
			ranked[rank] = v
			f.dst.Count = n
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("execution stats: %s: %w", f.name, err)
		}
		p := f.dst
		p.P50, p.P95, p.P99, p.Max = ranked[store.Rank(50, p.Count)], ranked[store.Rank(95, p.Count)],
			ranked[store.Rank(99, p.Count)], ranked[p.Count]
	}
	return st, nil
}
