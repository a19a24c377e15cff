package main

import (
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/internal/store/sqlstore"
	"github.com/corralhq/corral/sandbox"
)

// verifyOut runs corral audit verify with args and returns its status and
// stdout.
func verifyOut(t *testing.T, args ...string) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	code := cmdAudit(append([]string{"verify"}, args...))
	os.Stdout = old
	w.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// trail makes a store holding ten events of tenant acme and three of
// other, and returns its path.
func trail(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corral.db")
	st, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var es []sandbox.AuditEvent
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range 10 {
		es = append(es, sandbox.AuditEvent{Tenant: "acme", Time: at.Add(time.Duration(i) * time.Second), KeyID: "0123456789abcdef",
			SandboxID: "box", Action: audit.FileWrite, Outcome: audit.OK,
			Fields: map[string]string{"path": fmt.Sprintf("/workspace/%d", i), "size": "3"}})
		if i < 3 {
			es = append(es, sandbox.AuditEvent{Tenant: "other", Time: at, Action: audit.SandboxCreate, Outcome: audit.OK})
		}
	}
	if _, err := st.AppendAudit(t.Context(), es); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAuditVerify (issue 29, done when 2): editing or deleting one event
// in the store makes corral audit verify fail, naming it; the other
// tenant's chain still holds.
func TestAuditVerify(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(db *sql.DB) error
		wantSeq int64 // 0: holds
	}{
		{"untouched", func(db *sql.DB) error { return nil }, 0},
		{"field edited", func(db *sql.DB) error {
			_, err := db.Exec(`UPDATE audit_events SET fields = '{"path":"/workspace/innocent","size":"3"}' WHERE tenant = 'acme' AND seq = 4`)
			return err
		}, 4},
		{"key id edited", func(db *sql.DB) error {
			_, err := db.Exec(`UPDATE audit_events SET key_id = 'fedcba9876543210' WHERE tenant = 'acme' AND seq = 7`)
			return err
		}, 7},
		{"deleted", func(db *sql.DB) error {
			_, err := db.Exec(`DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 6`)
			return err
		}, 6},
		{"last deleted", func(db *sql.DB) error {
			_, err := db.Exec(`DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 10`)
			return err
		}, 10},
		{"edited and hash recomputed", func(db *sql.DB) error {
			e, err := sqlstore.ScanAudit(db.QueryRow(`SELECT tenant, seq, at, key_id, node, sandbox_id, execution_id, action, outcome,
				error, fields, prev_hash, hash FROM audit_events WHERE tenant = 'acme' AND seq = 3`).Scan)
			if err != nil {
				return err
			}
			e.Action = audit.FileRemove
			_, err = db.Exec(`UPDATE audit_events SET action = ?, hash = ? WHERE tenant = 'acme' AND seq = 3`, e.Action, audit.Hash(&e))
			return err
		}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := trail(t)
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			err = tt.tamper(db)
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			code, out := verifyOut(t, "--store", path, "--tenant", "acme,other")
			if !strings.Contains(out, "tenant other: ok, 3 events") {
				t.Errorf("the other tenant's chain: %q", out)
			}
			if tt.wantSeq == 0 {
				if code != 0 || !strings.Contains(out, "tenant acme: ok, 10 events") {
					t.Fatalf("verify: %d %q, want ok", code, out)
				}
				return
			}
			if want := fmt.Sprintf("tenant acme: BROKEN at event %d:", tt.wantSeq); code != 1 || !strings.Contains(out, want) {
				t.Fatalf("verify: %d %q, want status 1 and %q", code, out, want)
			}
		})
	}
	// A range that ends before the damage holds; one that covers it does not.
	path := trail(t)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM audit_events WHERE tenant = 'acme' AND seq = 8`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if code, out := verifyOut(t, "--store", path, "--tenant", "acme", "--to", "7"); code != 0 || !strings.Contains(out, "ok, 7 events") {
		t.Errorf("verify --to 7: %d %q", code, out)
	}
	if code, out := verifyOut(t, "--store", path, "--tenant", "acme", "--from", "5"); code != 1 || !strings.Contains(out, "BROKEN at event 8") {
		t.Errorf("verify --from 5: %d %q", code, out)
	}
}
