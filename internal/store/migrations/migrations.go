// Package migrations holds the one schema history both SQL stores apply:
// numbered files NNNN_name.sql written in the SQL that SQLite and
// PostgreSQL share, and the statements of the schema_migrations table that
// records which of them a database has. Each store applies them in its own
// transaction, under its own lock.
package migrations

import (
	"cmp"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
)

//go:embed *.sql
var files embed.FS

// Migration is one schema change.
type Migration struct {
	Version int64
	Name    string // the file name
	SQL     string // one or more statements
}

// Statements of the version table. Placeholders are $N, which both drivers
// bind by position.
const (
	CreateVersionTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
    version    BIGINT NOT NULL PRIMARY KEY,
    name       TEXT   NOT NULL,
    applied_at BIGINT NOT NULL
)`
	SelectVersions = `SELECT version FROM schema_migrations`
	InsertVersion  = `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`
)

// All returns every migration, by version.
func All() ([]Migration, error) {
	return parse(files)
}

// Pending returns the migrations whose versions are not in applied, by
// version. Versions this binary does not know (a newer node migrated the
// database) are ignored: migrations only ever add, so older code keeps
// working during a rolling upgrade.
func Pending(applied []int64) ([]Migration, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, m := range all {
		if !slices.Contains(applied, m.Version) {
			out = append(out, m)
		}
	}
	return out, nil
}

func parse(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var out []Migration
	seen := map[int64]string{}
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s: same version %d", prev, name, v)
		}
		seen[v] = name
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}
