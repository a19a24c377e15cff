package sqlstore

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/corralhq/corral/internal/store"
)

// Page sizes.
const (
	DefaultLimit = 50
	MaxLimit     = 1000
)

// ErrCursor reports a cursor this store did not hand out, or one used with
// another sort order than the page it came from.
var ErrCursor = store.ErrInvalid.With("cursor", "is not a cursor this server handed out for this sort")

// sortKey is one way to order a list: a column that holds an int64,
// ascending or descending, ties broken by id in the same direction.
type sortKey struct {
	column string
	desc   bool
	value  func(*store.Execution) int64
}

var sortKeys = map[string]sortKey{
	"created_at":   {"created_at", false, createdAt},
	"-created_at":  {"created_at", true, createdAt},
	"duration_ms":  {"duration_ms", false, duration},
	"-duration_ms": {"duration_ms", true, duration},
}

func createdAt(e *store.Execution) int64 { return Micros(e.Record.CreatedAt) }
func duration(e *store.Execution) int64  { return e.Record.DurationMS }

// cursor is where a page ended: the sort it belongs to, and the sort
// value and id of the page's last row. The next page starts strictly after
// that (value, id), so rows inserted meanwhile neither repeat nor hide rows
// that were already there.
type cursor struct {
	Sort  string `json:"s"`
	Value int64  `json:"v"`
	ID    string `json:"i"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c) // cannot fail: a string and an int
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	c, err := decodeCursorAny(s)
	if err != nil {
		return cursor{}, err
	}
	if _, ok := sortKeys[c.Sort]; !ok || c.ID == "" || !Text(c.ID) {
		return cursor{}, ErrCursor
	}
	return c, nil
}

// decodeCursorAny decodes any cursor this store hands out.
func decodeCursorAny(s string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, fmt.Errorf("%w: %w", ErrCursor, err)
	}
	var c cursor
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&c); err != nil {
		return cursor{}, fmt.Errorf("%w: %w", ErrCursor, err)
	}
	if d.More() {
		return cursor{}, fmt.Errorf("%w: trailing data", ErrCursor)
	}
	return c, nil
}

// List is a prepared ListExecutions query.
type List struct {
	// SQL and Args select one row more than the page holds, which tells
	// whether another page follows.
	SQL   string
	Args  []any
	limit int
	sort  string
	key   sortKey
}

// NewList checks q and builds the query of one page of tenant's
// executions. Since is inclusive and Until exclusive.
func NewList(tenant string, q store.Query) (*List, error) {
	l := &List{sort: q.Sort, limit: q.Limit}
	if l.sort == "" {
		l.sort = "-created_at"
	}
	key, ok := sortKeys[l.sort]
	if !ok {
		return nil, fmt.Errorf("sort %q: want created_at, -created_at, duration_ms or -duration_ms", q.Sort)
	}
	l.key = key
	switch {
	case l.limit == 0:
		l.limit = DefaultLimit
	case l.limit < 0:
		return nil, fmt.Errorf("limit %d: want 1..%d", q.Limit, MaxLimit)
	case l.limit > MaxLimit:
		l.limit = MaxLimit
	}
	for _, f := range []struct{ name, value string }{
		{"session id", q.SessionID}, {"status", string(q.Status)},
		{"error type", string(q.ErrorType)}, {"language", q.Language},
	} {
		if err := checkText(f.name, f.value); err != nil {
			return nil, fmt.Errorf("list executions: %w", err)
		}
	}

	var where []string
	arg := func(v any) string {
		l.Args = append(l.Args, v)
		return "$" + strconv.Itoa(len(l.Args))
	}
	where = append(where, "tenant = "+arg(tenant))
	if q.SessionID != "" {
		where = append(where, "session_id = "+arg(q.SessionID))
	}
	if q.Status != "" {
		where = append(where, "status = "+arg(string(q.Status)))
	}
	if q.ErrorType != "" {
		where = append(where, "error_type = "+arg(string(q.ErrorType)))
	}
	if q.Language != "" {
		where = append(where, "language = "+arg(q.Language))
	}
	if q.ExitCodeNe != nil {
		where = append(where, "exit_code IS NOT NULL AND exit_code <> "+arg(int64(*q.ExitCodeNe)))
	}
	if !q.Since.IsZero() {
		where = append(where, "created_at >= "+arg(Micros(normTime(q.Since))))
	}
	if !q.Until.IsZero() {
		where = append(where, "created_at < "+arg(Micros(normTime(q.Until))))
	}
	dir, op := "ASC", ">"
	if key.desc {
		dir, op = "DESC", "<"
	}
	if q.Cursor != "" {
		c, err := decodeCursor(q.Cursor)
		if err != nil {
			return nil, err
		}
		if c.Sort != l.sort {
			return nil, fmt.Errorf("%w: it continues sort %q, not %q", ErrCursor, c.Sort, l.sort)
		}
		// Row values compare lexicographically in both databases and use
		// the (…, sort column, id) indexes.
		where = append(where, fmt.Sprintf("(%s, id) %s (%s, %s)", key.column, op, arg(c.Value), arg(c.ID)))
	}
	l.SQL = fmt.Sprintf("SELECT %s FROM executions WHERE %s ORDER BY %s %s, id %s LIMIT %s",
		executionColumns, strings.Join(where, " AND "), key.column, dir, dir, arg(int64(l.limit+1)))
	return l, nil
}

// Page trims the rows the query returned to the page and returns the
// cursor of the next page, "" when this is the last.
func (l *List) Page(rows []*store.Execution) ([]*store.Execution, string) {
	if len(rows) <= l.limit {
		return rows, ""
	}
	rows = rows[:l.limit]
	last := rows[len(rows)-1]
	return rows, cursor{Sort: l.sort, Value: l.key.value(last), ID: last.ID}.encode()
}

// SortClaimed orders claimed deliveries as they were picked: RETURNING
// promises no order.
func SortClaimed(ds []store.Delivery) {
	slices.SortFunc(ds, func(a, b store.Delivery) int {
		return cmp.Or(a.NextAttempt.Compare(b.NextAttempt), strings.Compare(a.ID, b.ID))
	})
}
