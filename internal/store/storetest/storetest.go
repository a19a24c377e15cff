// Package storetest is the contract of store.Store: one suite that every
// implementation runs against a real database (storetest.Run from the
// sqlite and postgres tests), so the two stores cannot drift apart.
package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// Run runs the suite. open returns a new, empty store for one subtest and
// closes it when that subtest ends (t.Cleanup).
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"CreateIdempotent", testCreateIdempotent},
		{"TenantIsolation", testTenantIsolation},
		{"ConditionalUpdate", testConditionalUpdate},
		{"FinishAtomic", testFinishAtomic},
		{"QueryFilters", testQueryFilters},
		{"QueryFiltersAfterUpdates", testQueryFiltersAfterUpdates},
		{"Paging", testPaging},
		{"QueryLimits", testQueryLimits},
		{"BadQueries", testBadQueries},
		{"ExecutionsInStatus", testExecutionsInStatus},
		{"ClaimLeases", testClaimLeases},
		{"ClaimConcurrent", testClaimConcurrent},
		{"UpdateDelivery", testUpdateDelivery},
		{"Deliveries", testDeliveries},
		{"Concurrency", testConcurrency},
		{"HostileInput", testHostileInput},
		{"RejectedInput", testRejectedInput},
		{"Egress", testEgress},
		{"Stats", testStats},
		{"ExecutionClaims", testExecutionClaims},
		{"ExecutionClaimsConcurrent", testExecutionClaimsConcurrent},
		{"RequestCancel", testRequestCancel},
		{"NodeExecutions", testNodeExecutions},
		{"Nodes", testNodes},
		{"Sessions", testSessions},
		{"SessionsConcurrent", testSessionsConcurrent},
		{"SessionInfo", testSessionInfo},
		{"AuditChain", testAuditChain},
		{"AuditConcurrent", testAuditConcurrent},
		{"AuditQuery", testAuditQuery},
		{"AuditHostile", testAuditHostile},
		{"AuditPrune", testAuditPrune},
		{"Ping", func(t *testing.T, s store.Store) {
			if err := s.Ping(t.Context()); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

// base has nanoseconds and a zone, which the store must reduce to
// microseconds in UTC.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("IST", 5*3600+1800))

// full is an execution whose record has every field set.
func full(tenant, id string) *store.Execution {
	exit := 137
	return &store.Execution{
		Tenant: tenant, ID: id, RequestHash: "sha256:" + id, Node: "node-a",
		Request: []byte(`{"language":"python","code":"print(1/0)","limits":{"timeout_ms":30000}}`),
		Record: sandbox.Result{
			ExecutionID: id, SessionID: "session-1", Language: "python", Status: sandbox.StatusFailed,
			Error:    &sandbox.Failure{Type: sandbox.ErrInternal, Message: "sandbox lost", Retryable: true},
			ExitCode: &exit, Signal: "SIGKILL", Summary: "internal_error: sandbox lost (exit code 137). Next: retry.",
			Stdout: "hello\n", Stderr: "Traceback (most recent call last):\n",
			StdoutBytes: 6, StdoutLines: 1, StdoutTruncated: true,
			StderrBytes: 36, StderrLines: 1, StderrTruncated: true,
			DurationMS: 1234, QueueMS: 56, PeakMemoryMB: 78,
			Tier: "gvisor", TierReason: "untrusted", Image: "python", ImageDigest: "sha256:0123abcd",
			Limits: sandbox.Limits{TimeoutMS: 30000, MemoryMB: 512, CPUCores: 1.5, DiskMB: 1024},
			Artifacts: []sandbox.Artifact{{Path: "plot.png", URL: "https://blobs.test/plot.png?sig=a%2Fb", Size: 12345,
				MIME: "image/png", SHA256: "9f86d081884c7d65", ExpiresAt: base.Add(15*time.Minute + 7)}},
			ArtifactsSkipped: []sandbox.SkippedArtifact{{Path: "output/link", Reason: "symbolic link (not followed)"}},
			LimitsHit:        []sandbox.LimitHit{{Limit: sandbox.LimitProcesses, Max: 256, Count: 3, Detail: "3 forks refused at the limit of 256 processes and threads"}},
			Callback: &sandbox.CallbackState{URL: "https://hooks.test/cb", DeliveryID: "d-1", State: "pending",
				Attempts: 2, LastStatus: 502, LastError: "bad gateway", NextAttempt: base.Add(time.Minute + 5)},
			CreatedAt:  base,
			StartedAt:  base.Add(time.Second + 1),
			FinishedAt: base.Add(3*time.Second + 999),
		},
	}
}

// queued is a minimal execution waiting to run.
func queued(tenant, id string, created time.Time) *store.Execution {
	return &store.Execution{
		Tenant: tenant, ID: id, RequestHash: "h-" + id, Request: []byte(`{"code":"1"}`),
		Record: sandbox.Result{ExecutionID: id, Language: "python", Status: sandbox.StatusQueued, CreatedAt: created},
	}
}

// stored is e as the store gives it back: times at microsecond precision
// in UTC, and nothing shared with e.
func stored(e *store.Execution) *store.Execution {
	return deepCopy(reflect.ValueOf(e), true).Interface().(*store.Execution)
}

// clone is a deep copy of e.
func clone(e *store.Execution) *store.Execution {
	return deepCopy(reflect.ValueOf(e), false).Interface().(*store.Execution)
}

// deepCopy copies v, with every time in it reduced to microseconds in UTC
// when norm is set.
func deepCopy(v reflect.Value, norm bool) reflect.Value {
	out := reflect.New(v.Type()).Elem()
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			out.Set(reflect.New(v.Type().Elem()))
			out.Elem().Set(deepCopy(v.Elem(), norm))
		}
	case reflect.Slice:
		if !v.IsNil() {
			out.Set(reflect.MakeSlice(v.Type(), v.Len(), v.Len()))
			for i := range v.Len() {
				out.Index(i).Set(deepCopy(v.Index(i), norm))
			}
		}
	case reflect.Struct:
		if t, ok := v.Interface().(time.Time); ok {
			if norm {
				t = us(t)
			}
			out.Set(reflect.ValueOf(t))
			break
		}
		for i := range v.NumField() {
			out.Field(i).Set(deepCopy(v.Field(i), norm))
		}
	case reflect.Map:
		panic("storetest: deepCopy of a map: add it")
	default:
		out.Set(v)
	}
	return out
}

func us(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

func mustCreate(t *testing.T, s store.Store, e *store.Execution) {
	t.Helper()
	if _, created, err := s.CreateExecution(t.Context(), e); err != nil || !created {
		t.Fatalf("CreateExecution(%q, %q) = created %v, %v; want created", e.Tenant, e.ID, created, err)
	}
}

func mustGet(t *testing.T, s store.Store, tenant, id string) *store.Execution {
	t.Helper()
	e, err := s.GetExecution(t.Context(), tenant, id)
	if err != nil {
		t.Fatalf("GetExecution(%q, %q): %v", tenant, id, err)
	}
	return e
}

func checkUTC(t *testing.T, e *store.Execution) {
	t.Helper()
	r := e.Record
	for _, tm := range []time.Time{r.CreatedAt, r.StartedAt, r.FinishedAt} {
		if !tm.IsZero() && tm.Location() != time.UTC {
			t.Errorf("execution %q: time %v is not in UTC", e.ID, tm)
		}
	}
}

// allSet fails t if a field of v (recursively) has its zero value, so a
// field added to sandbox.Result later is round-tripped here too.
func allSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	if v.IsZero() {
		t.Errorf("fixture leaves %s unset", path)
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		allSet(t, path, v.Elem())
	case reflect.Slice:
		allSet(t, path+"[0]", v.Index(0))
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			return
		}
		for i := range v.NumField() {
			allSet(t, path+"."+v.Type().Field(i).Name, v.Field(i))
		}
	}
}

func testRoundTrip(t *testing.T, s store.Store) {
	e := full("acme", "exec-1")
	allSet(t, "Record", reflect.ValueOf(e.Record))
	in := clone(e)
	got, created, err := s.CreateExecution(t.Context(), e)
	if err != nil || !created {
		t.Fatalf("CreateExecution = created %v, %v", created, err)
	}
	want := stored(e)
	if diff := cmp.Diff(in, e); diff != "" {
		t.Errorf("CreateExecution changed its argument (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CreateExecution returned (-want +got):\n%s", diff)
	}
	got = mustGet(t, s, "acme", "exec-1")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GetExecution (-want +got):\n%s", diff)
	}
	checkUTC(t, got)
	if got.Record.CreatedAt.Nanosecond()%1000 != 0 || got.Record.CreatedAt.Nanosecond() == 0 {
		t.Errorf("CreatedAt %v: want microsecond precision, neither more nor less", got.Record.CreatedAt)
	}

	// A record without optional parts comes back without them.
	bare := queued("acme", "exec-2", base)
	bare.Request = nil
	mustCreate(t, s, bare)
	if diff := cmp.Diff(stored(bare), mustGet(t, s, "acme", "exec-2")); diff != "" {
		t.Errorf("GetExecution of a bare record (-want +got):\n%s", diff)
	}
}

func testCreateIdempotent(t *testing.T, s store.Store) {
	first := full("acme", "same")
	mustCreate(t, s, first)
	second := queued("acme", "same", base.Add(time.Hour))
	second.RequestHash = "another body"
	got, created, err := s.CreateExecution(t.Context(), second)
	if err != nil || created {
		t.Fatalf("second CreateExecution = created %v, %v; want the existing one", created, err)
	}
	if diff := cmp.Diff(stored(first), got); diff != "" {
		t.Errorf("second CreateExecution returned (-want existing +got):\n%s", diff)
	}
	if diff := cmp.Diff(stored(first), mustGet(t, s, "acme", "same")); diff != "" {
		t.Errorf("after a second create (-want +got):\n%s", diff)
	}

	// Racing creates of one id: exactly one creates it, all see it.
	var wg sync.WaitGroup
	var createdN atomic.Int32
	for i := range 16 {
		wg.Go(func() {
			e := queued("acme", "raced", base)
			e.Node = fmt.Sprint("node-", i)
			got, created, err := s.CreateExecution(t.Context(), e)
			if err != nil {
				t.Errorf("racing CreateExecution: %v", err)
				return
			}
			if created {
				createdN.Add(1)
			}
			if got.ID != "raced" || got.RequestHash != "h-raced" {
				t.Errorf("racing CreateExecution returned %+v", got)
			}
		})
	}
	wg.Wait()
	if n := createdN.Load(); n != 1 {
		t.Errorf("%d racing creates reported created, want 1", n)
	}
}

func testTenantIsolation(t *testing.T, s store.Store) {
	ctx := t.Context()
	a := full("tenant-a", "shared-id")
	mustCreate(t, s, a)
	if _, err := s.FinishExecution(ctx, a, []store.Delivery{delivery(a, "d-a", base)}); err != nil {
		t.Fatal(err)
	}

	if _, err := s.GetExecution(ctx, "tenant-b", "shared-id"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("other tenant's GetExecution: %v, want ErrNotFound", err)
	}
	if es, next, err := s.ListExecutions(ctx, "tenant-b", store.Query{}); err != nil || len(es) != 0 || next != "" {
		t.Errorf("other tenant's ListExecutions = %d rows, %q, %v; want none", len(es), next, err)
	}
	if ds, err := s.Deliveries(ctx, "tenant-b", "shared-id"); err != nil || len(ds) != 0 {
		t.Errorf("other tenant's Deliveries = %v, %v; want none", ds, err)
	}
	b := queued("tenant-b", "shared-id", base)
	if err := s.UpdateExecution(ctx, b); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("other tenant's UpdateExecution: %v, want ErrNotFound", err)
	}
	if n, err := s.CountExecutions(ctx, "tenant-b"); err != nil || n != 0 {
		t.Errorf("CountExecutions(tenant-b) = %d, %v; want 0", n, err)
	}

	// The same id in another tenant is another execution.
	mustCreate(t, s, b)
	if diff := cmp.Diff(stored(a), mustGet(t, s, "tenant-a", "shared-id")); diff != "" {
		t.Errorf("tenant-a's execution after tenant-b's create (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(stored(b), mustGet(t, s, "tenant-b", "shared-id")); diff != "" {
		t.Errorf("tenant-b's execution (-want +got):\n%s", diff)
	}
	for tenant, want := range map[string]int64{"tenant-a": 1, "tenant-b": 1, "": 2, "tenant-c": 0} {
		if n, err := s.CountExecutions(ctx, tenant); err != nil || n != want {
			t.Errorf("CountExecutions(%q) = %d, %v; want %d", tenant, n, err, want)
		}
	}
	es, _, err := s.ListExecutions(ctx, "tenant-b", store.Query{})
	if err != nil || len(es) != 1 || es[0].Tenant != "tenant-b" {
		t.Errorf("ListExecutions(tenant-b) = %v, %v; want only its own", es, err)
	}
}

func testConditionalUpdate(t *testing.T, s store.Store) {
	ctx := t.Context()
	tests := []struct {
		name    string
		current sandbox.Status // "" means absent
		from    []sandbox.Status
		wantErr error
	}{
		{"any status", sandbox.StatusRunning, nil, nil},
		{"from the current", sandbox.StatusQueued, []sandbox.Status{sandbox.StatusQueued}, nil},
		{"current among several", sandbox.StatusRunning, []sandbox.Status{sandbox.StatusQueued, sandbox.StatusRunning}, nil},
		{"from another", sandbox.StatusSuccess, []sandbox.Status{sandbox.StatusQueued, sandbox.StatusRunning}, store.ErrStale},
		{"absent", "", nil, store.ErrNotFound},
		{"absent with from", "", []sandbox.Status{sandbox.StatusQueued}, store.ErrNotFound},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprint("cond-", i)
			before := queued("acme", id, base)
			before.Record.Status = tt.current
			if tt.current != "" {
				mustCreate(t, s, before)
			}
			after := full("acme", id)
			after.Node = "node-b"
			err := s.UpdateExecution(ctx, after, tt.from...)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("UpdateExecution from %v on %q: %v, want %v", tt.from, tt.current, err, tt.wantErr)
			}
			want := stored(before)
			if err == nil {
				want = stored(after)
				want.RequestHash, want.Request = before.RequestHash, before.Request // not replaced
			}
			got, err := s.GetExecution(ctx, "acme", id)
			if tt.current == "" {
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("GetExecution after updating an absent execution: %v, want ErrNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("after UpdateExecution (-want +got):\n%s", diff)
			}
		})
	}
}

func delivery(e *store.Execution, id string, next time.Time) store.Delivery {
	return store.Delivery{
		ID: id, Tenant: e.Tenant, ExecutionID: e.ID, Kind: store.KindCallback,
		URL:  "https://hooks.test/corral?token=a&b=%20",
		Body: []byte(`{"execution_id":"` + e.ID + `","status":"success"}`), State: store.DeliveryPending,
		NextAttempt: next, CreatedAt: base, UpdatedAt: base,
	}
}

// storedDelivery is d as the store gives it back.
func storedDelivery(d store.Delivery) store.Delivery {
	d.Body = slices.Clone(d.Body)
	d.NextAttempt, d.LeaseUntil, d.CreatedAt, d.UpdatedAt = us(d.NextAttempt), us(d.LeaseUntil), us(d.CreatedAt), us(d.UpdatedAt)
	return d
}

func testFinishAtomic(t *testing.T, s store.Store) {
	ctx := t.Context()
	e := queued("acme", "fin", base)
	mustCreate(t, s, e)
	running := stored(e)
	running.Record.Status = sandbox.StatusRunning
	if err := s.UpdateExecution(ctx, running, sandbox.StatusQueued); err != nil {
		t.Fatal(err)
	}

	done := full("acme", "fin")
	done.Record.Status = sandbox.StatusSuccess
	ds := []store.Delivery{delivery(done, "fin-cb", base), delivery(done, "fin-mem", base.Add(time.Microsecond))}
	ds[1].Kind = store.KindMemory
	// A stale finish stores neither the record nor its deliveries.
	if _, err := s.FinishExecution(ctx, done, ds, sandbox.StatusQueued); !errors.Is(err, store.ErrStale) {
		t.Fatalf("FinishExecution from queued on a running execution: %v, want ErrStale", err)
	}
	if got, err := s.Deliveries(ctx, "acme", "fin"); err != nil || len(got) != 0 {
		t.Fatalf("Deliveries after a stale finish = %v, %v; want none", got, err)
	}
	rec, err := s.FinishExecution(ctx, done, ds, sandbox.StatusRunning)
	if err != nil {
		t.Fatal(err)
	}
	want := stored(done)
	want.RequestHash, want.Request = e.RequestHash, e.Request
	if diff := cmp.Diff(want, mustGet(t, s, "acme", "fin")); diff != "" {
		t.Errorf("finished execution (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&want.Record, rec); diff != "" {
		t.Errorf("FinishExecution's record (-stored +returned):\n%s", diff)
	}
	got, err := s.Deliveries(ctx, "acme", "fin")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Delivery{storedDelivery(ds[0]), storedDelivery(ds[1])}, got); diff != "" {
		t.Errorf("Deliveries (-want +got):\n%s", diff)
	}

	// A finish whose delivery cannot be stored (its id is taken) stores
	// nothing: no record without its callbacks.
	other := queued("acme", "fin-2", base)
	mustCreate(t, s, other)
	otherDone := stored(other)
	otherDone.Record.Status = sandbox.StatusSuccess
	_, err = s.FinishExecution(ctx, otherDone, []store.Delivery{delivery(otherDone, "fin-2-cb", base), delivery(otherDone, "fin-cb", base)})
	if err == nil {
		t.Fatal("FinishExecution with a taken delivery id succeeded")
	}
	if got := mustGet(t, s, "acme", "fin-2"); got.Record.Status != sandbox.StatusQueued {
		t.Errorf("after a failed finish the status is %q, want queued", got.Record.Status)
	}
	if got, err := s.Deliveries(ctx, "acme", "fin-2"); err != nil || len(got) != 0 {
		t.Errorf("Deliveries after a failed finish = %v, %v; want none", got, err)
	}
	// Deliveries default to the execution's tenant and id, and to pending.
	bare := store.Delivery{ID: "fin-2-bare", Kind: store.KindCallback, URL: "https://hooks.test/", Body: []byte("{}")}
	if _, err := s.FinishExecution(ctx, otherDone, []store.Delivery{bare}, sandbox.StatusQueued); err != nil {
		t.Fatal(err)
	}
	got, err = s.Deliveries(ctx, "acme", "fin-2")
	if err != nil || len(got) != 1 || got[0].Tenant != "acme" || got[0].ExecutionID != "fin-2" || got[0].State != store.DeliveryPending {
		t.Errorf("Deliveries of a bare delivery = %+v, %v", got, err)
	}
}

// queryRows are executions with distinct creation times and durations, so
// that every order is fully determined.
func queryRows() []*store.Execution {
	statuses := []sandbox.Status{sandbox.StatusSuccess, sandbox.StatusFailed, sandbox.StatusQueued, sandbox.StatusRunning, sandbox.StatusFailed, sandbox.StatusCancelled}
	var out []*store.Execution
	for i := range 18 {
		e := queued("q", fmt.Sprintf("q-%02d", i), base.Add(time.Duration(i)*time.Minute))
		r := &e.Record
		r.SessionID = []string{"s1", "s2", "s2"}[i%3]
		r.Language = []string{"python", "bash"}[i%2]
		r.DurationMS = int64((i*7)%18) * 100
		r.Status = statuses[i%len(statuses)]
		exit := func(n int) *int { return &n }
		switch {
		case r.Status == sandbox.StatusSuccess:
			r.ExitCode = exit(0)
		case r.Status == sandbox.StatusFailed && i%4 == 1:
			r.Error = &sandbox.Failure{Type: sandbox.ErrRuntime, Message: "boom"}
			r.ExitCode = exit(1 + i%2)
		case r.Status == sandbox.StatusFailed:
			r.Error = &sandbox.Failure{Type: sandbox.ErrTimeout, Message: "slow"}
		case r.Status == sandbox.StatusCancelled:
			r.Error = &sandbox.Failure{Type: sandbox.ErrCancelled, Message: "stop"}
			r.ExitCode = exit(130)
		}
		out = append(out, e)
	}
	return out
}

// matches is the meaning of a Query, the oracle the store is held to.
func matches(q store.Query, e *store.Execution) bool {
	r := e.Record
	errType := sandbox.ErrorType("")
	if r.Error != nil {
		errType = r.Error.Type
	}
	created := us(r.CreatedAt)
	return (q.SessionID == "" || r.SessionID == q.SessionID) &&
		(q.Status == "" || r.Status == q.Status) &&
		(q.ErrorType == "" || errType == q.ErrorType) &&
		(q.Language == "" || r.Language == q.Language) &&
		(q.ExitCodeNe == nil || (r.ExitCode != nil && *r.ExitCode != *q.ExitCodeNe)) &&
		(q.Since.IsZero() || !created.Before(us(q.Since))) &&
		(q.Until.IsZero() || created.Before(us(q.Until)))
}

// sortValue is the value an execution sorts by, and whether the order is
// descending.
func sortValue(sort string, e *store.Execution) (int64, bool) {
	switch strings.TrimPrefix(sort, "-") {
	case "duration_ms":
		return e.Record.DurationMS, strings.HasPrefix(sort, "-")
	default:
		return e.Record.CreatedAt.UnixMicro(), sort == "" || strings.HasPrefix(sort, "-")
	}
}

// listAll pages through q and returns every row.
func listAll(t *testing.T, s store.Store, tenant string, q store.Query) []*store.Execution {
	t.Helper()
	var all []*store.Execution
	for page := 0; ; page++ {
		es, next, err := s.ListExecutions(t.Context(), tenant, q)
		if err != nil {
			t.Fatalf("ListExecutions page %d: %v", page, err)
		}
		if q.Limit > 0 && len(es) > q.Limit {
			t.Fatalf("ListExecutions page %d has %d rows, limit %d", page, len(es), q.Limit)
		}
		all = append(all, es...)
		if next == "" {
			return all
		}
		if len(es) == 0 {
			t.Fatalf("ListExecutions page %d is empty but has a next cursor", page)
		}
		if page > 1000 {
			t.Fatal("ListExecutions does not end")
		}
		q.Cursor = next
	}
}

func ids(es []*store.Execution) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

func testQueryFilters(t *testing.T, s store.Store) {
	rows := queryRows()
	for _, e := range rows {
		mustCreate(t, s, e)
	}
	checkQueries(t, s, rows)
}

// testQueryFiltersAfterUpdates stores the rows of testQueryFilters as a
// run does: each is created queued, claimed, then finished into its form
// there, which FinishExecution returns as stored. A third of them are
// created with another session, language, tier and creation time, which
// the finish changes. The queries find every row by its final values,
// whichever columns an update sets.
func testQueryFiltersAfterUpdates(t *testing.T, s store.Store) {
	rows := queryRows()
	for i, e := range rows {
		first := queued(e.Tenant, e.ID, e.Record.CreatedAt)
		first.Record.SessionID, first.Record.Language = e.Record.SessionID, e.Record.Language
		if i%3 == 0 {
			first.Record.SessionID, first.Record.Language, first.Record.Tier = "before", "before", "before"
			first.Record.CreatedAt = base.Add(-time.Hour)
		}
		// Each for a node of its own: those that end queued are not claimed again.
		e.Target = "node-" + e.ID
		first.Target = e.Target
		mustCreate(t, s, first)
		claimed, err := s.ClaimExecution(t.Context(), e.Target, base)
		if err != nil || claimed.ID != e.ID {
			t.Fatalf("ClaimExecution = %v, %v; want %s", claimed, err, e.ID)
		}
		if got, _, err := s.ListExecutions(t.Context(), "q", store.Query{Status: sandbox.StatusRunning}); err != nil || !slices.Contains(ids(got), e.ID) {
			t.Fatalf("running after the claim of %s: %v, %v", e.ID, ids(got), err)
		}
		rec, err := s.FinishExecution(t.Context(), e, nil, sandbox.StatusRunning)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(&stored(e).Record, rec); diff != "" {
			t.Errorf("FinishExecution's record of %s (-want +got):\n%s", e.ID, diff)
		}
	}
	checkQueries(t, s, rows)
}

// checkQueries checks ListExecutions against matches over rows, which are
// stored, of tenant "q".
func checkQueries(t *testing.T, s store.Store, rows []*store.Execution) {
	t.Helper()
	mustCreate(t, s, queued("other-tenant", "q-00", base)) // never listed
	zero, one := 0, 1
	tests := []struct {
		name string
		q    store.Query
	}{
		{"everything", store.Query{}},
		{"session", store.Query{SessionID: "s1"}},
		{"status", store.Query{Status: sandbox.StatusFailed}},
		{"error type", store.Query{ErrorType: sandbox.ErrTimeout}},
		{"language", store.Query{Language: "bash"}},
		{"exit code not 0", store.Query{ExitCodeNe: &zero}},
		{"exit code not 1", store.Query{ExitCodeNe: &one}},
		{"since", store.Query{Since: base.Add(5 * time.Minute)}},
		{"until", store.Query{Until: base.Add(5 * time.Minute)}},
		{"since and until", store.Query{Since: base.Add(3 * time.Minute), Until: base.Add(9*time.Minute + time.Second)}},
		{"session and status", store.Query{SessionID: "s2", Status: sandbox.StatusFailed}},
		{"language and exit code", store.Query{Language: "python", ExitCodeNe: &zero}},
		{"no match", store.Query{SessionID: "s1", Status: sandbox.StatusRunning, Language: "python"}},
		{"unknown session", store.Query{SessionID: "nope"}},
		{"oldest first", store.Query{Sort: "created_at"}},
		{"longest first", store.Query{Sort: "-duration_ms", Status: sandbox.StatusFailed}},
		{"shortest first", store.Query{Sort: "duration_ms", SessionID: "s2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var want []*store.Execution
			for _, e := range rows {
				if matches(tt.q, e) {
					want = append(want, e)
				}
			}
			slices.SortFunc(want, func(a, b *store.Execution) int {
				va, desc := sortValue(tt.q.Sort, a)
				vb, _ := sortValue(tt.q.Sort, b)
				if desc {
					va, vb = vb, va
				}
				return int(va - vb)
			})
			for _, limit := range []int{0, 1, 4} {
				q := tt.q
				q.Limit = limit
				got := listAll(t, s, "q", q)
				if diff := cmp.Diff(ids(want), ids(got)); diff != "" {
					t.Errorf("limit %d: ids (-want +got):\n%s", limit, diff)
				}
			}
			es, _, err := s.ListExecutions(t.Context(), "q", tt.q)
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range es {
				if diff := cmp.Diff(stored(want[i]), e); diff != "" {
					t.Errorf("row %d (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// testPaging pages through rows with many equal sort values while other
// rows are inserted between pages: every row that was there from the start
// is seen exactly once, and the order holds across pages.
func testPaging(t *testing.T, s store.Store) {
	const n = 60
	for i := range n {
		e := queued("p", fmt.Sprintf("p-%03d", (i*37)%n), base.Add(time.Duration(i/4)*time.Second))
		e.Record.DurationMS = int64((i * 13) % 9)
		mustCreate(t, s, e)
	}
	inserted := 0
	for _, sort := range []string{"", "-created_at", "created_at", "duration_ms", "-duration_ms"} {
		t.Run("sort="+sort, func(t *testing.T) {
			q := store.Query{Sort: sort, Limit: 7}
			seen := map[string]int{}
			var prev *store.Execution
			for page := 0; ; page++ {
				es, next, err := s.ListExecutions(t.Context(), "p", q)
				if err != nil {
					t.Fatalf("page %d: %v", page, err)
				}
				for _, e := range es {
					seen[e.ID]++
					if prev != nil {
						a, desc := sortValue(sort, prev)
						b, _ := sortValue(sort, e)
						if (desc && b > a) || (!desc && b < a) {
							t.Errorf("page %d: %s (%d) after %s (%d)", page, e.ID, b, prev.ID, a)
						}
					}
					prev = e
				}
				if next == "" {
					break
				}
				// Rows before, inside and after the page just read.
				for _, d := range []time.Duration{-time.Hour, 0, time.Hour} {
					inserted++
					e := queued("p", fmt.Sprintf("new-%04d", inserted), base.Add(time.Duration(page)*time.Second+d))
					e.Record.DurationMS = int64(inserted % 11)
					mustCreate(t, s, e)
				}
				q.Cursor = next
			}
			for i := range n {
				if id := fmt.Sprintf("p-%03d", i); seen[id] != 1 {
					t.Errorf("%s seen %d times, want once", id, seen[id])
				}
			}
			for id, k := range seen {
				if k != 1 {
					t.Errorf("%s seen %d times", id, k)
				}
			}
		})
	}
}

func testQueryLimits(t *testing.T, s store.Store) {
	for i := range 1001 {
		mustCreate(t, s, queued("lim", fmt.Sprintf("l-%04d", i), base.Add(time.Duration(i)*time.Millisecond)))
	}
	tests := []struct {
		limit    int
		want     int
		wantNext bool
	}{
		{0, 50, true},
		{1, 1, true},
		{1000, 1000, true},
		{1001, 1000, true},
		{100000, 1000, true},
	}
	for _, tt := range tests {
		es, next, err := s.ListExecutions(t.Context(), "lim", store.Query{Limit: tt.limit})
		if err != nil || len(es) != tt.want || (next != "") != tt.wantNext {
			t.Errorf("Limit %d: %d rows, next %q, %v; want %d rows, next %v", tt.limit, len(es), next, err, tt.want, tt.wantNext)
			continue
		}
		if es[0].ID != "l-1000" {
			t.Errorf("Limit %d: first row %s, want the newest (l-1000)", tt.limit, es[0].ID)
		}
	}
	// The last page has no cursor.
	es, next, err := s.ListExecutions(t.Context(), "lim", store.Query{Limit: 1000, Since: base.Add(time.Millisecond)})
	if err != nil || len(es) != 1000 || next != "" {
		t.Errorf("exactly a full page: %d rows, next %q, %v; want 1000 rows and no cursor", len(es), next, err)
	}
}

func testBadQueries(t *testing.T, s store.Store) {
	for i := range 3 {
		mustCreate(t, s, queued("b", fmt.Sprint("b-", i), base.Add(time.Duration(i)*time.Second)))
	}
	_, next, err := s.ListExecutions(t.Context(), "b", store.Query{Limit: 1})
	if err != nil || next == "" {
		t.Fatalf("first page: next %q, %v", next, err)
	}
	tests := []struct {
		name string
		q    store.Query
	}{
		{"unknown sort", store.Query{Sort: "status"}},
		{"sql in sort", store.Query{Sort: "created_at; DROP TABLE executions"}},
		{"negative limit", store.Query{Limit: -1}},
		{"garbage cursor", store.Query{Cursor: "not a cursor!"}},
		{"base64 garbage cursor", store.Query{Cursor: "Z2FyYmFnZQ"}},
		{"cursor of another sort", store.Query{Cursor: next, Sort: "duration_ms"}},
		{"truncated cursor", store.Query{Cursor: next[:len(next)/2]}},
	}
	for _, tt := range tests {
		if es, _, err := s.ListExecutions(t.Context(), "b", tt.q); err == nil {
			t.Errorf("%s: ListExecutions = %d rows, want an error", tt.name, len(es))
		}
	}
	if n, err := s.CountExecutions(t.Context(), "b"); err != nil || n != 3 {
		t.Errorf("CountExecutions after bad queries = %d, %v; want 3", n, err)
	}
}

func testExecutionsInStatus(t *testing.T, s store.Store) {
	ctx := t.Context()
	var want []string
	for i := range 6 {
		for _, tenant := range []string{"a", "b"} {
			e := queued(tenant, fmt.Sprint("x-", i), base.Add(time.Duration(i)*time.Minute))
			if i == 2 {
				e.Record.Status = sandbox.StatusRunning
			}
			mustCreate(t, s, e)
			if i != 2 && i < 4 {
				want = append(want, tenant+"/"+e.ID)
			}
		}
	}
	key := func(es []*store.Execution) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Tenant+"/"+e.ID)
		}
		return out
	}
	tests := []struct {
		name   string
		status sandbox.Status
		before time.Time
		limit  int
		want   []string
	}{
		{"all before", sandbox.StatusQueued, base.Add(4 * time.Minute), 100, want},
		{"limit", sandbox.StatusQueued, base.Add(4 * time.Minute), 3, want[:3]},
		{"before is exclusive", sandbox.StatusQueued, base, 100, nil},
		{"other status", sandbox.StatusRunning, base.Add(time.Hour), 100, []string{"a/x-2", "b/x-2"}},
		{"none in status", sandbox.StatusSuccess, base.Add(time.Hour), 100, nil},
	}
	for _, tt := range tests {
		got, err := s.ExecutionsInStatus(ctx, tt.status, tt.before, tt.limit)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if diff := cmp.Diff(tt.want, key(got)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

// finishWith creates a queued execution and finishes it with ds.
func finishWith(t *testing.T, s store.Store, e *store.Execution, ds ...store.Delivery) {
	t.Helper()
	mustCreate(t, s, e)
	done := stored(e)
	done.Record.Status = sandbox.StatusSuccess
	if _, err := s.FinishExecution(t.Context(), done, ds, sandbox.StatusQueued); err != nil {
		t.Fatal(err)
	}
}

func claimIDs(ds []store.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

func testClaimLeases(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := base.Add(time.Hour)
	e := queued("acme", "claims", base)
	due1 := delivery(e, "due-1", now.Add(-time.Minute))
	due2 := delivery(e, "due-2", now.Add(-2*time.Minute))
	later := delivery(e, "later", now.Add(40*time.Second))
	delivered := delivery(e, "delivered", now.Add(-time.Hour))
	delivered.State = store.DeliveryDelivered
	failed := delivery(e, "failed", now.Add(-time.Hour))
	failed.State = store.DeliveryFailed
	finishWith(t, s, e, due1, due2, later, delivered, failed)

	const lease = 30 * time.Second
	got, err := s.ClaimDeliveries(ctx, now, lease, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantLeased := func(d store.Delivery, until time.Time) store.Delivery {
		d.LeaseUntil = until
		return storedDelivery(d)
	}
	if diff := cmp.Diff([]store.Delivery{wantLeased(due2, now.Add(lease)), wantLeased(due1, now.Add(lease))}, got); diff != "" {
		t.Fatalf("first claim (-want +got):\n%s", diff)
	}

	steps := []struct {
		name  string
		at    time.Time
		limit int
		want  []string
	}{
		{"leased ones are not claimed again", now.Add(lease - time.Microsecond), 10, nil},
		{"an expired lease is claimable", now.Add(lease), 1, []string{"due-2"}},
		{"the rest of them", now.Add(lease), 10, []string{"due-1"}},
		{"a delivery is claimed once due", now.Add(lease + lease/2), 10, []string{"later"}},
		{"all expired again", now.Add(24 * time.Hour), 10, []string{"due-2", "due-1", "later"}},
		{"delivered and failed never", now.Add(48 * time.Hour), 10, []string{"due-2", "due-1", "later"}},
	}
	for _, st := range steps {
		got, err := s.ClaimDeliveries(ctx, st.at, lease, st.limit)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if diff := cmp.Diff(st.want, claimIDs(got)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
		for _, d := range got {
			if !d.LeaseUntil.Equal(us(st.at.Add(lease))) {
				t.Errorf("%s: %s leased until %v, want %v", st.name, d.ID, d.LeaseUntil, us(st.at.Add(lease)))
			}
		}
	}
	for _, bad := range []struct {
		lease time.Duration
		limit int
	}{{0, 10}, {lease, 0}, {-lease, 10}} {
		if _, err := s.ClaimDeliveries(ctx, now, bad.lease, bad.limit); err == nil {
			t.Errorf("ClaimDeliveries(lease %v, limit %d) succeeded, want an error", bad.lease, bad.limit)
		}
	}
}

func testClaimConcurrent(t *testing.T, s store.Store) {
	const n, claimers = 300, 8
	e := queued("acme", "many", base)
	var ds []store.Delivery
	for i := range n {
		ds = append(ds, delivery(e, fmt.Sprintf("many-%03d", i), base.Add(time.Duration(i%17)*time.Second)))
	}
	finishWith(t, s, e, ds...)

	now := base.Add(time.Hour)
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	for range claimers {
		wg.Go(func() {
			for {
				got, err := s.ClaimDeliveries(t.Context(), now, time.Hour, 7)
				if err != nil {
					t.Errorf("ClaimDeliveries: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, d := range got {
					claimed[d.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(claimed) != n {
		t.Errorf("%d deliveries claimed, want %d", len(claimed), n)
	}
	for id, k := range claimed {
		if k != 1 {
			t.Errorf("%s claimed %d times", id, k)
		}
	}
}

func testUpdateDelivery(t *testing.T, s store.Store) {
	ctx := t.Context()
	e := queued("acme", "upd", base)
	d := delivery(e, "upd-1", base)
	finishWith(t, s, e, d)
	claimed, err := s.ClaimDeliveries(ctx, base.Add(time.Minute), time.Minute, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("ClaimDeliveries = %v, %v", claimed, err)
	}

	// A failed attempt: retry later.
	retry := claimed[0]
	retry.Attempts = 1
	retry.LastStatus = 503
	retry.LastError = `receiver answered 503 "Service Unavailable"`
	retry.NextAttempt = base.Add(time.Hour + 123*time.Nanosecond)
	retry.LeaseUntil = time.Time{}
	retry.UpdatedAt = base.Add(2 * time.Minute)
	if err := s.UpdateDelivery(ctx, retry); err != nil {
		t.Fatal(err)
	}
	got, err := s.Deliveries(ctx, "acme", "upd")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]store.Delivery{storedDelivery(retry)}, got); diff != "" {
		t.Errorf("after UpdateDelivery (-want +got):\n%s", diff)
	}
	if got, _ := s.ClaimDeliveries(ctx, base.Add(59*time.Minute), time.Minute, 10); len(got) != 0 {
		t.Errorf("claimed before its next attempt: %v", claimIDs(got))
	}
	again, err := s.ClaimDeliveries(ctx, base.Add(61*time.Minute), time.Minute, 10)
	if err != nil || len(again) != 1 {
		t.Fatalf("claim at the next attempt = %v, %v", claimIDs(again), err)
	}

	// Delivered: never again.
	ok := again[0]
	ok.State, ok.Attempts, ok.LastStatus, ok.LastError = store.DeliveryDelivered, 2, 204, ""
	ok.LeaseUntil, ok.UpdatedAt = time.Time{}, base.Add(62*time.Minute)
	if err := s.UpdateDelivery(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClaimDeliveries(ctx, base.Add(1000*time.Hour), time.Minute, 10); len(got) != 0 {
		t.Errorf("a delivered delivery was claimed: %v", claimIDs(got))
	}
	got, _ = s.Deliveries(ctx, "acme", "upd")
	if diff := cmp.Diff([]store.Delivery{storedDelivery(ok)}, got); diff != "" {
		t.Errorf("after delivery (-want +got):\n%s", diff)
	}

	missing := ok
	missing.ID = "no-such-delivery"
	if err := s.UpdateDelivery(ctx, missing); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("UpdateDelivery of an absent delivery: %v, want ErrNotFound", err)
	}
	bad := ok
	bad.State = "sent"
	if err := s.UpdateDelivery(ctx, bad); err == nil {
		t.Error("UpdateDelivery to an unknown state succeeded")
	}
}

func testDeliveries(t *testing.T, s store.Store) {
	ctx := t.Context()
	e := queued("acme", "list", base)
	var ds []store.Delivery
	for i, off := range []time.Duration{3, 1, 2} {
		d := delivery(e, fmt.Sprint("list-", i), base)
		d.CreatedAt = base.Add(off * time.Second)
		ds = append(ds, d)
	}
	finishWith(t, s, e, ds...)
	finishWith(t, s, queued("acme", "list-other", base), delivery(queued("acme", "list-other", base), "other-1", base))
	got, err := s.Deliveries(ctx, "acme", "list")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"list-1", "list-2", "list-0"}, claimIDs(got)); diff != "" {
		t.Errorf("Deliveries, oldest first (-want +got):\n%s", diff)
	}
	for _, tc := range []struct{ tenant, id string }{{"acme", "nope"}, {"other", "list"}} {
		if got, err := s.Deliveries(ctx, tc.tenant, tc.id); err != nil || len(got) != 0 {
			t.Errorf("Deliveries(%q, %q) = %v, %v; want none", tc.tenant, tc.id, claimIDs(got), err)
		}
	}
}

// testConcurrency runs 1000 executions through their life from 32
// goroutines while others read.
func testConcurrency(t *testing.T, s store.Store) {
	const n, workers = 1000, 32
	ctx := t.Context()
	work := make(chan int)
	var wg sync.WaitGroup
	var stale atomic.Int32
	for range workers {
		wg.Go(func() {
			for i := range work {
				id := fmt.Sprintf("c-%04d", i)
				e := queued("conc", id, base.Add(time.Duration(i)*time.Millisecond))
				if _, created, err := s.CreateExecution(ctx, e); err != nil || !created {
					t.Errorf("create %s: created %v, %v", id, created, err)
					continue
				}
				e.Record.Status, e.Node = sandbox.StatusRunning, "node-x"
				if err := s.UpdateExecution(ctx, e, sandbox.StatusQueued); err != nil {
					t.Errorf("start %s: %v", id, err)
					continue
				}
				if err := s.UpdateExecution(ctx, e, sandbox.StatusQueued); errors.Is(err, store.ErrStale) {
					stale.Add(1)
				} else {
					t.Errorf("second start of %s: %v, want ErrStale", id, err)
				}
				e.Record.Status, e.Record.DurationMS = sandbox.StatusSuccess, int64(i)
				if _, err := s.FinishExecution(ctx, e, []store.Delivery{delivery(e, "cd-"+id, base)}, sandbox.StatusRunning); err != nil {
					t.Errorf("finish %s: %v", id, err)
				}
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, err := s.ListExecutions(ctx, "conc", store.Query{Limit: 20, Sort: "-duration_ms"}); err != nil {
					t.Errorf("ListExecutions while writing: %v", err)
					return
				}
				if _, err := s.CountExecutions(ctx, "conc"); err != nil {
					t.Errorf("CountExecutions while writing: %v", err)
					return
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(stop)
	readers.Wait()

	if got := stale.Load(); got != n {
		t.Errorf("%d stale updates refused, want %d", got, n)
	}
	if c, err := s.CountExecutions(ctx, "conc"); err != nil || c != n {
		t.Errorf("CountExecutions = %d, %v; want %d", c, err, n)
	}
	done, err := s.ExecutionsInStatus(ctx, sandbox.StatusSuccess, base.Add(time.Hour), 2*n)
	if err != nil || len(done) != n {
		t.Errorf("ExecutionsInStatus(success) = %d, %v; want %d", len(done), err, n)
	}
	if all := listAll(t, s, "conc", store.Query{Limit: 1000, Sort: "duration_ms"}); len(all) != n || all[n-1].Record.DurationMS != n-1 {
		t.Errorf("ListExecutions: %d rows, want %d", len(all), n)
	}
	claimed, err := s.ClaimDeliveries(ctx, base, time.Minute, 2*n)
	if err != nil || len(claimed) != n {
		t.Errorf("ClaimDeliveries = %d, %v; want %d", len(claimed), err, n)
	}
}

// hostile are ids and text that quoting, escaping or encoding bugs trip on.
var hostile = []string{
	`it's "quoted"`,
	`back\slash\\`,
	`'; DROP TABLE executions; --`,
	`$1 ?1 :name @p %s %_*`,
	"émoji 🦀 ünïcödé 零 \u202eright-to-left",
	"tab\tnew\nline\rreturn",
	"combining e\u0301 and zero\u200bwidth",
	strings.Repeat("long-", 100), // 500 bytes, near the longest key
}

func testHostileInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	// 1 MiB of output with every byte value a program might print,
	// including NUL, in valid UTF-8.
	var b strings.Builder
	for b.Len() < 1<<20 {
		for r := rune(0); r < 0x800; r += 7 {
			b.WriteRune(r)
		}
		b.WriteString("'\"\\`$; 🦀\n")
	}
	stdout := b.String()
	for i, text := range hostile {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			e := full(text, text)
			e.RequestHash = text
			e.Request = []byte(`{"code":` + fmt.Sprintf("%q", text) + `}`)
			e.Node = text
			e.Record.SessionID, e.Record.Language, e.Record.Signal = text, text, text
			e.Record.Stdout, e.Record.Stderr = stdout, text
			e.Record.Error.Message = text
			e.Record.Artifacts[0].Path = text
			mustCreate(t, s, e)
			got := mustGet(t, s, text, text)
			// Comparing megabytes byte by byte would take cmp seconds.
			fast := cmp.Comparer(bytes.Equal)
			if diff := cmp.Diff(stored(e), got, fast); diff != "" {
				t.Errorf("GetExecution (-want +got):\n%.2000s", diff)
			}
			if got.Record.Stdout != stdout {
				t.Errorf("stdout of %d bytes came back as %d bytes", len(stdout), len(got.Record.Stdout))
			}
			es, _, err := s.ListExecutions(ctx, text, store.Query{SessionID: text, Language: text})
			if err != nil || len(es) != 1 || es[0].ID != text {
				t.Errorf("ListExecutions by hostile session and language = %d rows, %v; want 1", len(es), err)
			}
			d := delivery(e, text, base)
			d.Kind, d.URL = text, "https://hooks.test/"+text
			d.Body = []byte(fmt.Sprintf(`{"stdout":%q}`, stdout))
			d.LastError = text
			if _, err := s.FinishExecution(ctx, e, []store.Delivery{d}); err != nil {
				t.Fatal(err)
			}
			ds, err := s.Deliveries(ctx, text, text)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]store.Delivery{storedDelivery(d)}, ds, fast); diff != "" {
				t.Errorf("Deliveries (-want +got):\n%.2000s", diff)
			}
			if n, err := s.CountExecutions(ctx, text); err != nil || n != 1 {
				t.Errorf("CountExecutions = %d, %v; want 1", n, err)
			}
		})
	}
}

// testRejectedInput: what a store cannot hold byte for byte it refuses
// with an error, storing nothing, rather than altering it.
func testRejectedInput(t *testing.T, s store.Store) {
	ctx := t.Context()
	tests := []struct {
		name string
		edit func(e *store.Execution)
	}{
		{"NUL in id", func(e *store.Execution) { e.ID, e.Record.ExecutionID = "a\x00b", "a\x00b" }},
		{"NUL in tenant", func(e *store.Execution) { e.Tenant = "t\x00" }},
		{"invalid UTF-8 in session", func(e *store.Execution) { e.Record.SessionID = "s\xff" }},
		{"invalid UTF-8 in request", func(e *store.Execution) { e.Request = []byte("{\"code\":\"\xc3\x28\"}") }},
		{"NUL in request", func(e *store.Execution) { e.Request = []byte("{\x00}") }},
		{"no id", func(e *store.Execution) { e.ID, e.Record.ExecutionID = "", "" }},
		{"no tenant", func(e *store.Execution) { e.Tenant = "" }},
		{"record of another execution", func(e *store.Execution) { e.Record.ExecutionID = "other" }},
		{"id too long", func(e *store.Execution) { e.ID, e.Record.ExecutionID = strings.Repeat("x", 513), "" }},
		{"session too long", func(e *store.Execution) { e.Record.SessionID = strings.Repeat("é", 257) }},
	}
	for _, tt := range tests {
		e := full("acme", "rejected")
		tt.edit(e)
		if _, _, err := s.CreateExecution(ctx, e); err == nil {
			t.Errorf("%s: CreateExecution succeeded, want an error", tt.name)
		}
	}
	if n, err := s.CountExecutions(ctx, ""); err != nil || n != 0 {
		t.Errorf("CountExecutions after rejected creates = %d, %v; want 0", n, err)
	}
	if _, err := s.GetExecution(ctx, "acme", "a\x00b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetExecution with a NUL in the id: %v, want ErrNotFound", err)
	}
	if _, err := s.GetExecution(ctx, "acme", "\xff"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetExecution with invalid UTF-8 in the id: %v, want ErrNotFound", err)
	}
	if _, _, err := s.ListExecutions(ctx, "acme", store.Query{SessionID: "\x00"}); err == nil {
		t.Error("ListExecutions with a NUL in the session succeeded, want an error")
	}

	e := queued("acme", "rejected-deliveries", base)
	mustCreate(t, s, e)
	for name, d := range map[string]store.Delivery{
		"NUL in body":        {ID: "d1", Body: []byte("{\"a\":\"\x00\"}")},
		"invalid UTF-8 url":  {ID: "d2", URL: "https://x.test/\xff"},
		"no id":              {Body: []byte("{}")},
		"unknown state":      {ID: "d3", State: "sent"},
		"another execution":  {ID: "d4", ExecutionID: "other"},
		"another tenant":     {ID: "d5", Tenant: "other"},
		"NUL in delivery id": {ID: "d\x00"},
	} {
		done := stored(e)
		done.Record.Status = sandbox.StatusSuccess
		if _, err := s.FinishExecution(ctx, done, []store.Delivery{d}); err == nil {
			t.Errorf("%s: FinishExecution succeeded, want an error", name)
		}
	}
	if got := mustGet(t, s, "acme", "rejected-deliveries"); got.Record.Status != sandbox.StatusQueued {
		t.Errorf("after rejected finishes the status is %q, want queued", got.Record.Status)
	}
	if ds, err := s.Deliveries(ctx, "acme", "rejected-deliveries"); err != nil || len(ds) != 0 {
		t.Errorf("Deliveries after rejected finishes = %v, %v; want none", claimIDs(ds), err)
	}
}

// testEgress: attempts round-trip in order, batches append, tenants and
// executions are apart, and concurrent batches for one execution keep
// every attempt.
func testEgress(t *testing.T, s store.Store) {
	ctx := t.Context()
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	first := []sandbox.EgressAttempt{
		{Time: at, Method: "CONNECT", Host: "api.github.com", Port: 443, Allowed: true, Address: "140.82.1.1:443", BytesUp: 10, BytesDown: 2000},
		{Time: at.Add(time.Second), Method: "GET", Host: "evil.example", Port: 80, Reason: "domain not in the allowlist"},
	}
	if err := s.AddEgress(ctx, "t1", "ex1", first); err != nil {
		t.Fatal(err)
	}
	more := []sandbox.EgressAttempt{{Time: at.Add(2 * time.Second), Method: "GET", Host: "allowed.test", Port: 80, Allowed: true, Status: 200, BytesDown: 5}}
	if err := s.AddEgress(ctx, "t1", "ex1", more); err != nil {
		t.Fatal(err)
	}
	got, err := s.Egress(ctx, "t1", "ex1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(first, more...), got); diff != "" {
		t.Errorf("egress (-want +got):\n%s", diff)
	}
	if other, _ := s.Egress(ctx, "t2", "ex1"); len(other) != 0 {
		t.Errorf("another tenant sees %d attempts", len(other))
	}
	if none, err := s.Egress(ctx, "t1", "nope"); err != nil || len(none) != 0 {
		t.Errorf("unknown execution: %v %v", none, err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := []sandbox.EgressAttempt{{Time: at, Method: "CONNECT", Host: "h", Port: 443}, {Time: at, Method: "CONNECT", Host: "h", Port: 443}}
			if err := s.AddEgress(ctx, "t1", "ex2", batch); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if all, _ := s.Egress(ctx, "t1", "ex2"); len(all) != 16 {
		t.Errorf("concurrent batches kept %d of 16", len(all))
	}
}

// statsRows are executions of tenant "st", one every 30 s from base, in
// every status, with ties in duration and latency, some that never ran
// (duration 0, no tier) and some still queued or running.
func statsRows() []*store.Execution {
	var out []*store.Execution
	for i := range 240 {
		// Nanoseconds in created_at, which the store cuts to microseconds.
		e := queued("st", fmt.Sprintf("st-%03d", i), base.Add(time.Duration(i)*30*time.Second))
		r := &e.Record
		r.Tier = []string{"container", "gvisor", "container"}[i%3]
		r.DurationMS = int64((i*37)%50) * 10 // ties: 50 distinct values
		latency := time.Duration(r.DurationMS)*time.Millisecond + time.Duration((i*53)%97)*time.Millisecond + 999*time.Microsecond
		switch i % 8 {
		case 0, 1, 2, 3:
			r.Status = sandbox.StatusSuccess
		case 4:
			r.Status, r.Error = sandbox.StatusFailed, &sandbox.Failure{Type: sandbox.ErrRuntime, Message: "boom"}
		case 5:
			r.Status, r.Error = sandbox.StatusFailed, &sandbox.Failure{Type: sandbox.ErrTimeout, Message: "slow"}
		case 6:
			if i%16 == 6 {
				r.Status, r.Error = sandbox.StatusFailed, &sandbox.Failure{Type: sandbox.ErrInput, Message: "bad file"}
			} else {
				r.Status, r.Error = sandbox.StatusCancelled, &sandbox.Failure{Type: sandbox.ErrCancelled, Message: "stop"}
			}
			r.DurationMS, r.Tier = 0, "" // never ran
		case 7:
			r.Status = []sandbox.Status{sandbox.StatusQueued, sandbox.StatusRunning}[(i/8)%2]
			r.DurationMS, latency = 0, -1
		}
		if latency >= 0 {
			r.FinishedAt = r.CreatedAt.Add(latency)
		}
		out = append(out, e)
	}
	return out
}

// wantStats is the meaning of ExecutionStats, the oracle the store is held
// to: the definitions of store.Stats and store.Percentiles, computed here
// from the records.
func wantStats(rows []*store.Execution, since, until time.Time) *store.Stats {
	st := &store.Stats{ByStatus: map[sandbox.Status]int64{}, ByErrorType: map[sandbox.ErrorType]int64{},
		ByTier: map[string]int64{}}
	var durations, latencies []int64
	for _, e := range rows {
		r := e.Record
		created := us(r.CreatedAt)
		if created.Before(us(since)) || !created.Before(us(until)) {
			continue
		}
		st.Total++
		st.ByStatus[r.Status]++
		if !r.Status.Final() {
			continue
		}
		st.ByTier[r.Tier]++
		if r.Error != nil {
			st.ByErrorType[r.Error.Type]++
		}
		if r.DurationMS > 0 {
			durations = append(durations, r.DurationMS)
		}
		if finished := us(r.FinishedAt); !finished.Before(created) {
			latencies = append(latencies, finished.Sub(created).Milliseconds())
		}
	}
	st.Duration, st.Latency = percentiles(durations), percentiles(latencies)
	return st
}

func percentiles(vs []int64) store.Percentiles {
	if len(vs) == 0 {
		return store.Percentiles{}
	}
	slices.Sort(vs)
	n := int64(len(vs))
	at := func(p int64) int64 {
		// Nearest rank, computed in floating point here to check the
		// store's integer arithmetic.
		rank := int64(math.Ceil(float64(p) * float64(n) / 100))
		return vs[rank-1]
	}
	return store.Percentiles{Count: n, P50: at(50), P95: at(95), P99: at(99), Max: vs[n-1]}
}

func testStats(t *testing.T, s store.Store) {
	ctx := t.Context()
	rows := statsRows()
	for _, e := range rows {
		mustCreate(t, s, e)
	}
	// Another tenant's executions in the same window never count.
	for _, e := range statsRows()[:40] {
		e.Tenant = "other"
		mustCreate(t, s, e)
	}
	at := func(i int) time.Time { return base.Add(time.Duration(i) * 30 * time.Second) }
	tests := []struct {
		name         string
		since, until time.Time
	}{
		{"everything", base.Add(-time.Hour), base.Add(3 * time.Hour)},
		// since is inclusive and until exclusive, to the microsecond.
		{"bounds", at(10), at(130)},
		{"bounds as stored", us(at(10)), us(at(130))},
		{"a microsecond in", at(10).Add(time.Microsecond), at(130).Add(time.Microsecond)},
		{"one execution", at(0), at(1)},
		{"two executions", at(1), at(3)},
		{"a hundred and one", at(50), at(151)},
		{"only unfinished", at(7), at(8)},
		{"empty", base.Add(-2 * time.Hour), base.Add(-time.Hour)},
		{"in another zone", at(3).In(time.FixedZone("X", -5*3600)), at(200)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ExecutionStats(ctx, "st", tt.since, tt.until)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantStats(rows, tt.since, tt.until), got); diff != "" {
				t.Errorf("ExecutionStats(%v, %v) (-want +got):\n%s", tt.since, tt.until, diff)
			}
		})
	}
	// The fixture means something: the wide window has every kind of row.
	if w := wantStats(rows, base.Add(-time.Hour), base.Add(3*time.Hour)); w.Duration.Count < 100 || w.Latency.Count <= w.Duration.Count ||
		len(w.ByErrorType) != 4 || w.ByTier[""] == 0 || w.ByStatus[sandbox.StatusRunning] == 0 || w.Duration.P50 == w.Duration.P99 {
		t.Fatalf("statsRows does not cover what it should: %+v", w)
	}

	// Finishing an execution moves it: status, tier and percentiles follow
	// the record.
	e := queued("st2", "moving", base)
	mustCreate(t, s, e)
	since, until := base.Add(-time.Minute), base.Add(time.Minute)
	got, err := s.ExecutionStats(ctx, "st2", since, until)
	if err != nil {
		t.Fatal(err)
	}
	if got.Total != 1 || got.ByStatus[sandbox.StatusQueued] != 1 || len(got.ByTier) != 0 || got.Latency.Count != 0 {
		t.Errorf("a queued execution: %+v", got)
	}
	done := clone(e)
	done.Record.Status, done.Record.Tier, done.Record.DurationMS = sandbox.StatusSuccess, "gvisor", 250
	done.Record.FinishedAt = e.Record.CreatedAt.Add(400 * time.Millisecond)
	if err := s.UpdateExecution(ctx, done, sandbox.StatusQueued); err != nil {
		t.Fatal(err)
	}
	got, err = s.ExecutionStats(ctx, "st2", since, until)
	if err != nil {
		t.Fatal(err)
	}
	want := &store.Stats{Total: 1, ByStatus: map[sandbox.Status]int64{sandbox.StatusSuccess: 1},
		ByErrorType: map[sandbox.ErrorType]int64{}, ByTier: map[string]int64{"gvisor": 1},
		Duration: store.Percentiles{Count: 1, P50: 250, P95: 250, P99: 250, Max: 250},
		Latency:  store.Percentiles{Count: 1, P50: 400, P95: 400, P99: 400, Max: 400}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after finishing (-want +got):\n%s", diff)
	}

	for name, w := range map[string][2]time.Time{
		"since = until": {base, base},
		"since > until": {base.Add(time.Second), base},
	} {
		if _, err := s.ExecutionStats(ctx, "st", w[0], w[1]); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := s.ExecutionStats(ctx, "st\x00", since, until); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a NUL in the tenant: %v, want ErrInvalid", err)
	}
}
