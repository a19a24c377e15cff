package postgres

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/migrations"
	"github.com/corralhq/corral/internal/store/storetest"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

func open(t *testing.T, url string) *DB {
	t.Helper()
	db, err := Open(t.Context(), url)
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
		return open(t, testenv.Postgres(t))
	})
}

// TestOpenTogether opens one database from several stores at once, as
// nodes starting together would: the advisory lock makes one of them
// migrate and the others find nothing left to do.
func TestOpenTogether(t *testing.T) {
	url := testenv.Postgres(t)
	const n = 8
	dbs := make([]*DB, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			db, err := Open(t.Context(), url)
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
	var want []int64
	for _, m := range all {
		want = append(want, m.Version)
	}
	rows, _ := dbs[0].pool.Query(t.Context(), migrations.SelectVersions+" ORDER BY version")
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("schema_migrations (-want +got):\n%s", diff)
	}
}

// TestReopen: what one store wrote, the next one opened on the database
// reads, and opening again migrates nothing twice.
func TestReopen(t *testing.T) {
	url := testenv.Postgres(t)
	db, err := Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	e := &store.Execution{Tenant: "t", ID: "kept", Request: []byte("{}"),
		Record: sandbox.Result{ExecutionID: "kept", Language: "bash", Status: sandbox.StatusQueued}}
	if _, _, err := db.CreateExecution(t.Context(), e); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = open(t, url)
	got, err := db.GetExecution(t.Context(), "t", "kept")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("after reopening (-want +got):\n%s", diff)
	}
}

func TestOpenBadURL(t *testing.T) {
	for _, url := range []string{"postgres://user:secret@[bad", "mysql://x"} {
		if _, err := Open(t.Context(), url); err == nil {
			t.Errorf("Open(%q) succeeded", url)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): error %q shows the password", url, err)
		}
	}
}
