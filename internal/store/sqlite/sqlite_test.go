package sqlite

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/migrations"
	"github.com/corralhq/corral/internal/store/storetest"
	"github.com/corralhq/corral/sandbox"
)

func open(t *testing.T, dsn string) *DB {
	t.Helper()
	db, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return db
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "corral.db"))
	})
}

func TestFilePath(t *testing.T) {
	tests := []struct {
		dsn     string
		want    string
		wantErr bool
	}{
		{dsn: "sqlite:///var/lib/corral/corral.db", want: "/var/lib/corral/corral.db"},
		{dsn: "sqlite:///var/lib/with%20space.db", want: "/var/lib/with space.db"},
		{dsn: "sqlite://data/corral.db", want: "data/corral.db"},
		{dsn: "sqlite:corral.db", want: "corral.db"},
		{dsn: "/var/lib/corral/corral.db", want: "/var/lib/corral/corral.db"},
		{dsn: "relative/what?.db", want: "relative/what?.db"},
		{dsn: "", wantErr: true},
		{dsn: "sqlite://", wantErr: true},
		{dsn: "sqlite:///x.db?cache=shared", wantErr: true},
	}
	for _, tt := range tests {
		got, err := filePath(tt.dsn)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("filePath(%q) = %q, %v; want %q, error %v", tt.dsn, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestOpenTogether opens one file from several stores at once, as two
// processes starting together would: the schema is applied once and every
// store works.
func TestOpenTogether(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir", "odd?name#.db")
	const n = 6
	dbs := make([]*DB, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			db, err := Open(t.Context(), path)
			if err != nil {
				t.Errorf("open %d: %v", i, err)
				return
			}
			dbs[i] = db
		})
	}
	wg.Wait()
	for _, db := range dbs {
		if db != nil {
			t.Cleanup(func() { db.Close() })
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var want, got []int64
	for _, m := range all {
		want = append(want, m.Version)
	}
	rows, err := dbs[0].r.QueryContext(t.Context(), migrations.SelectVersions+" ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", diff)
	}

	// Writes from several stores on one file all land.
	for i, db := range dbs {
		e := &store.Execution{Tenant: "t", ID: string(rune('a' + i)), Record: sandboxResult(string(rune('a' + i)))}
		if _, _, err := db.CreateExecution(t.Context(), e); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
	if c, err := dbs[n-1].CountExecutions(t.Context(), "t"); err != nil || c != n {
		t.Errorf("CountExecutions = %d, %v; want %d", c, err, n)
	}
}

// TestReopen: what one store wrote, the next one opened on the file reads.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	db, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	e := &store.Execution{Tenant: "t", ID: "kept", Request: []byte("{}"), Record: sandboxResult("kept")}
	if _, _, err := db.CreateExecution(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = open(t, "sqlite://"+path)
	got, err := db.GetExecution(t.Context(), "t", "kept")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("after reopening (-want +got):\n%s", diff)
	}
}

func sandboxResult(id string) sandbox.Result {
	return sandbox.Result{ExecutionID: id, Language: "bash", Status: sandbox.StatusQueued}
}
