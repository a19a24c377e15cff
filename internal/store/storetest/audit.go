package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

func auditEvent(tenant, sb, action, key string, at time.Time) sandbox.AuditEvent {
	return sandbox.AuditEvent{Tenant: tenant, Time: at, KeyID: key, Node: "node-a", SandboxID: sb, Action: action,
		Outcome: audit.OK, Fields: map[string]string{"path": "/workspace/ä.txt", "sha256": strings.Repeat("ab", 32)}}
}

// testAuditChain: appended events are numbered per tenant from 1, linked
// and hashed, read back as stored, and the chain verifies.
func testAuditChain(t *testing.T, s store.Store) {
	ctx := t.Context()
	var in []sandbox.AuditEvent
	for i := range 5 {
		in = append(in, auditEvent("acme", "sb1", audit.FileWrite, "k1", base.Add(time.Duration(i)*time.Second)))
		in = append(in, auditEvent("other", "sb2", audit.ProcessStart, "k2", base))
	}
	got, err := s.AppendAudit(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(in) {
		t.Fatalf("AppendAudit returned %d events, want %d", len(got), len(in))
	}
	next := map[string]int64{"acme": 1, "other": 1}
	prev := map[string]string{}
	for _, e := range got {
		if e.Seq != next[e.Tenant] || e.PrevHash != prev[e.Tenant] || e.Hash != audit.Hash(&e) {
			t.Fatalf("event %+v: want seq %d after hash %q, and its own hash", e, next[e.Tenant], prev[e.Tenant])
		}
		next[e.Tenant]++
		prev[e.Tenant] = e.Hash
	}
	more, err := s.AppendAudit(ctx, []sandbox.AuditEvent{auditEvent("acme", "sb1", audit.FileRemove, "k1", base)})
	if err != nil {
		t.Fatal(err)
	}
	if more[0].Seq != 6 || more[0].PrevHash != prev["acme"] {
		t.Fatalf("second batch: seq %d prev %q, want 6 after %q", more[0].Seq, more[0].PrevHash, prev["acme"])
	}
	list, _, err := s.ListAudit(ctx, "acme", store.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := append(filterTenant(got, "acme"), more...)
	if len(list) != len(want) {
		t.Fatalf("ListAudit: %d events, want %d", len(list), len(want))
	}
	for i := range list {
		if !list[i].Time.Equal(want[i].Time) || list[i].Hash != want[i].Hash || list[i].Fields["path"] != "/workspace/ä.txt" {
			t.Fatalf("event %d read back as %+v, stored %+v", i, list[i], want[i])
		}
	}
	head, err := s.AuditHead(ctx, "acme")
	if err != nil || head.Seq != 6 || head.Hash != more[0].Hash {
		t.Fatalf("AuditHead = %+v, %v; want seq 6, the last hash", head, err)
	}
	if n, err := store.VerifyAudit(ctx, s, "acme", 0, 0); err != nil || n != 6 {
		t.Fatalf("VerifyAudit = %d, %v; want 6 events that hold", n, err)
	}
	if h, err := s.AuditHead(ctx, "nobody"); err != nil || h != (audit.Head{}) {
		t.Fatalf("AuditHead of a tenant without events = %+v, %v", h, err)
	}
}

func filterTenant(es []sandbox.AuditEvent, tenant string) []sandbox.AuditEvent {
	var out []sandbox.AuditEvent
	for _, e := range es {
		if e.Tenant == tenant {
			out = append(out, e)
		}
	}
	return out
}

// testAuditConcurrent: writers appending for one tenant at once (nodes
// sharing the database) take numbers that follow each other, and the
// chain holds.
func testAuditConcurrent(t *testing.T, s store.Store) {
	ctx := t.Context()
	const writers, batches = 6, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				batch := []sandbox.AuditEvent{
					auditEvent("acme", fmt.Sprintf("w%d", w), audit.ProcessStart, "k", base.Add(time.Duration(b)*time.Millisecond)),
					auditEvent("zeta", "x", audit.ProcessStart, "k", base),
					auditEvent("acme", fmt.Sprintf("w%d", w), audit.ProcessEnd, "k", base),
				}
				if _, err := s.AppendAudit(ctx, batch); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for tenant, want := range map[string]int64{"acme": writers * batches * 2, "zeta": writers * batches} {
		if n, err := store.VerifyAudit(ctx, s, tenant, 0, 0); err != nil || n != want {
			t.Fatalf("%s: VerifyAudit = %d, %v; want %d events that hold", tenant, n, err, want)
		}
	}
}

// testAuditQuery: filters, paging, tenant isolation, bad cursors.
func testAuditQuery(t *testing.T, s store.Store) {
	ctx := t.Context()
	var in []sandbox.AuditEvent
	for i := range 30 {
		e := auditEvent("acme", fmt.Sprintf("sb%d", i%3), []string{audit.FileWrite, audit.ProcessStart}[i%2],
			fmt.Sprintf("k%d", i%5), base.Add(time.Duration(i)*time.Minute))
		if i%10 == 0 {
			e.ExecutionID = "ex1"
		}
		in = append(in, e)
	}
	in = append(in, auditEvent("other", "sb0", audit.FileWrite, "k0", base))
	if _, err := s.AppendAudit(ctx, in); err != nil {
		t.Fatal(err)
	}
	count := func(q store.AuditQuery, tenant string) []sandbox.AuditEvent {
		t.Helper()
		var all []sandbox.AuditEvent
		for {
			page, next, err := s.ListAudit(ctx, tenant, q)
			if err != nil {
				t.Fatal(err)
			}
			if q.Limit > 0 && len(page) > q.Limit {
				t.Fatalf("page of %d, limit %d", len(page), q.Limit)
			}
			all = append(all, page...)
			if next == "" {
				return all
			}
			q.Cursor = next
		}
	}
	tests := []struct {
		name string
		q    store.AuditQuery
		want int
	}{
		{"all", store.AuditQuery{}, 30},
		{"paged", store.AuditQuery{Limit: 7}, 30},
		{"sandbox", store.AuditQuery{SandboxID: "sb1", Limit: 4}, 10},
		{"action", store.AuditQuery{Action: audit.FileWrite}, 15},
		{"key", store.AuditQuery{KeyID: "k2"}, 6},
		{"execution", store.AuditQuery{ExecutionID: "ex1"}, 3},
		{"since", store.AuditQuery{Since: base.Add(20 * time.Minute)}, 10},
		{"until", store.AuditQuery{Until: base.Add(5 * time.Minute)}, 5},
		{"seq range", store.AuditQuery{FromSeq: 3, ToSeq: 12, Limit: 3}, 10},
		{"combined", store.AuditQuery{SandboxID: "sb0", Action: audit.FileWrite}, 5},
		{"none", store.AuditQuery{SandboxID: "nope"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := count(tt.q, "acme")
			if len(got) != tt.want {
				t.Fatalf("%d events, want %d", len(got), tt.want)
			}
			for i, e := range got {
				if e.Tenant != "acme" || (i > 0 && e.Seq <= got[i-1].Seq) {
					t.Fatalf("event %d: %+v (tenant acme, ascending seq)", i, e)
				}
			}
		})
	}
	if got := count(store.AuditQuery{}, "nobody"); len(got) != 0 {
		t.Fatalf("another tenant sees %d events", len(got))
	}
	for _, c := range []string{"x", "eyJzIjoiY3JlYXRlZF9hdCIsInYiOjEsImkiOiJhIn0"} {
		if _, _, err := s.ListAudit(ctx, "acme", store.AuditQuery{Cursor: c}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("cursor %q: %v, want ErrInvalid", c, err)
		}
	}
	if _, _, err := s.ListAudit(ctx, "acme", store.AuditQuery{SandboxID: "a\x00b"}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("NUL in a filter: %v, want ErrInvalid", err)
	}
}

// testAuditHostile: text a database cannot hold is cleaned, not refused;
// a key too long for an index is refused whole.
func testAuditHostile(t *testing.T, s store.Store) {
	ctx := t.Context()
	e := auditEvent("acme", "sb", audit.ProcessStart, "k", base)
	e.Fields = map[string]string{"argv": "[\"a\x00b\xff\"]", "big": strings.Repeat("x", 1<<20)}
	got, err := s.AppendAudit(ctx, []sandbox.AuditEvent{e})
	if err != nil {
		t.Fatal(err)
	}
	list, _, err := s.ListAudit(ctx, "acme", store.AuditQuery{})
	if err != nil || len(list) != 1 || list[0].Hash != got[0].Hash || audit.Hash(&list[0]) != got[0].Hash {
		t.Fatalf("ListAudit = %v, %v; want the cleaned event, its hash intact", list, err)
	}
	if len(list[0].Fields["big"]) > audit.MaxField+16 {
		t.Fatalf("a 1 MiB field kept %d bytes", len(list[0].Fields["big"]))
	}
	bad := auditEvent("acme", strings.Repeat("s", 1000), audit.ProcessStart, "k", base)
	if _, err := s.AppendAudit(ctx, []sandbox.AuditEvent{auditEvent("acme", "ok", audit.FileWrite, "k", base), bad}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a sandbox id of 1000 bytes: %v, want ErrInvalid", err)
	}
	if h, _ := s.AuditHead(ctx, "acme"); h.Seq != 1 {
		t.Fatalf("a refused batch moved the head to %d", h.Seq)
	}
}

// testAuditPrune: retention deletes the oldest events, remembers where it
// stopped, and the rest still verifies; appends continue the chain.
func testAuditPrune(t *testing.T, s store.Store) {
	ctx := t.Context()
	var in []sandbox.AuditEvent
	for i := range 10 {
		in = append(in, auditEvent("acme", "sb", audit.FileWrite, "k", base.Add(time.Duration(i)*time.Hour)))
	}
	in = append(in, auditEvent("other", "sb", audit.FileWrite, "k", base))
	if _, err := s.AppendAudit(ctx, in); err != nil {
		t.Fatal(err)
	}
	n, err := s.PruneAudit(ctx, "acme", base.Add(4*time.Hour))
	if err != nil || n != 4 {
		t.Fatalf("PruneAudit = %d, %v; want 4", n, err)
	}
	if n, err := s.PruneAudit(ctx, "acme", base.Add(4*time.Hour)); err != nil || n != 0 {
		t.Fatalf("PruneAudit again = %d, %v; want 0", n, err)
	}
	if h, _ := s.AuditHead(ctx, "acme"); h.Pruned != 4 || h.Seq != 10 {
		t.Fatalf("head after prune: %+v", h)
	}
	if _, err := s.AppendAudit(ctx, []sandbox.AuditEvent{auditEvent("acme", "sb", audit.FileRemove, "k", base.Add(11*time.Hour))}); err != nil {
		t.Fatal(err)
	}
	if n, err := store.VerifyAudit(ctx, s, "acme", 0, 0); err != nil || n != 7 {
		t.Fatalf("VerifyAudit after prune = %d, %v; want 7 events that hold", n, err)
	}
	if n, err := store.VerifyAudit(ctx, s, "other", 0, 0); err != nil || n != 1 {
		t.Fatalf("another tenant after prune = %d, %v", n, err)
	}
	if n, err := s.PruneAudit(ctx, "nobody", base); err != nil || n != 0 {
		t.Fatalf("PruneAudit of a tenant without events = %d, %v", n, err)
	}
}
