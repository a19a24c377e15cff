package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/netpolicy"
	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/internal/store/sqlite"
	"github.com/corralhq/corral/sandbox"
)

// These tests run a Notifier against a real SQLite store in a temporary
// directory and real HTTP receivers on loopback, as any user. Nothing
// asserts how long anything took: the configuration makes retries follow
// each other within milliseconds, a fake clock stands in where the test
// needs time to stand still, and waits have generous deadlines.

// fast retries within milliseconds.
func fast() Config {
	return Config{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 4 * time.Millisecond,
		Timeout: 10 * time.Second, Poll: 5 * time.Millisecond, Lease: time.Minute}
}

var quiet = slog.New(slog.DiscardHandler)

// loopback is the production client with private destinations allowed,
// as for receivers in the same cluster.
func loopback() *http.Client {
	return netpolicy.Guard{AllowPrivate: true}.Client(time.Minute)
}

// secrets gives each tenant its own callback secret.
func secrets(tenant string) []byte { return []byte("secret-of-" + tenant) }

func callbackRoutes() map[string]Route {
	return map[string]Route{store.KindCallback: {Client: loopback(), Secret: secrets}}
}

// ---- store ----

func openStore(t *testing.T, path string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close store: %v", err)
		}
	})
	return db
}

func newStore(t *testing.T) *sqlite.DB {
	return openStore(t, filepath.Join(t.TempDir(), "corral.db"))
}

var executions atomic.Int64

// addDelivery stores d as node.record does: with the final record of a
// new execution, in one transaction. Unset fields get a tenant "acme", a
// new execution, a callback kind, a JSON body, and are due now.
func addDelivery(t *testing.T, st store.Store, d store.Delivery) store.Delivery {
	t.Helper()
	now := time.Now().UTC()
	if d.Tenant == "" {
		d.Tenant = "acme"
	}
	if d.ExecutionID == "" {
		d.ExecutionID = fmt.Sprintf("ex_%d", executions.Add(1))
	}
	if d.Kind == "" {
		d.Kind = store.KindCallback
	}
	if d.ID == "" {
		d.ID = "dl_" + d.ExecutionID + "_" + d.Kind
	}
	if d.Body == nil {
		d.Body = []byte(`{"execution_id":"` + d.ExecutionID + `","status":"success"}`)
	}
	d.State = store.DeliveryPending
	if d.NextAttempt.IsZero() {
		d.NextAttempt = now
	}
	d.CreatedAt, d.UpdatedAt = now, now
	e := &store.Execution{Tenant: d.Tenant, ID: d.ExecutionID, RequestHash: "h", Request: []byte(`{}`),
		Record: sandbox.Result{ExecutionID: d.ExecutionID, Language: "python", Status: sandbox.StatusQueued, CreatedAt: now}}
	if _, created, err := st.CreateExecution(t.Context(), e); err != nil || !created {
		t.Fatalf("create execution %s: created %v, %v", e.ID, created, err)
	}
	e.Record.Status, e.Record.FinishedAt = sandbox.StatusSuccess, now
	if _, err := st.FinishExecution(t.Context(), e, []store.Delivery{d}, sandbox.StatusQueued); err != nil {
		t.Fatal(err)
	}
	return d
}

// stored is d as the store holds it now.
func stored(t *testing.T, st store.Store, d store.Delivery) store.Delivery {
	t.Helper()
	ds, err := st.Deliveries(t.Context(), d.Tenant, d.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range ds {
		if got.ID == d.ID {
			return got
		}
	}
	t.Fatalf("delivery %s not in the store", d.ID)
	return store.Delivery{}
}

// waitStored waits until the stored d satisfies ok and returns it.
func waitStored(t *testing.T, st store.Store, d store.Delivery, what string, ok func(store.Delivery) bool) store.Delivery {
	t.Helper()
	var got store.Delivery
	waitFor(t, fmt.Sprintf("delivery %s: %s", d.ID, what), func() bool {
		got = stored(t, st, d)
		return ok(got)
	})
	return got
}

func inState(state string) func(store.Delivery) bool {
	return func(d store.Delivery) bool { return d.State == state }
}

func attempted(n int) func(store.Delivery) bool {
	return func(d store.Delivery) bool { return d.Attempts >= n }
}

// waitFor polls cond until it holds; the deadline only catches a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// observed is a real store that also counts claims, remembers what each
// handed out, and can fail the next calls as a database going away would.
type observed struct {
	store.Store

	mu          sync.Mutex
	claims      int            // ClaimDeliveries calls that returned
	claimed     map[string]int // times each delivery was handed out
	failClaims  int            // the next this many claims fail
	failUpdates int            // the next this many updates fail
	failed      int            // updates failed so far
}

func observe(st store.Store) *observed { return &observed{Store: st, claimed: map[string]int{}} }

func (o *observed) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]store.Delivery, error) {
	o.mu.Lock()
	if o.failClaims > 0 {
		o.failClaims--
		o.claims++
		o.mu.Unlock()
		return nil, fmt.Errorf("claim deliveries: %w", store.ErrUnavailable)
	}
	o.mu.Unlock()
	ds, err := o.Store.ClaimDeliveries(ctx, now, lease, limit)
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claims++
	for _, d := range ds {
		o.claimed[d.ID]++
	}
	return ds, err
}

func (o *observed) UpdateDelivery(ctx context.Context, d store.Delivery) error {
	o.mu.Lock()
	if o.failUpdates > 0 {
		o.failUpdates--
		o.failed++
		o.mu.Unlock()
		return fmt.Errorf("update delivery %s: %w", d.ID, store.ErrUnavailable)
	}
	o.mu.Unlock()
	return o.Store.UpdateDelivery(ctx, d)
}

func (o *observed) claimCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.claims
}

func (o *observed) timesClaimed(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.claimed[id]
}

// waitClaims waits for n more claims than have returned so far: claims
// that started after every write the caller has seen.
func (o *observed) waitClaims(t *testing.T, n int) {
	t.Helper()
	target := o.claimCount() + n + 1 // +1: one may be under way already
	waitFor(t, fmt.Sprintf("%d claims", target), func() bool { return o.claimCount() >= target })
}

// ---- receiver ----

type hit struct {
	method, path string
	header       http.Header
	body         []byte
}

// receiver is a real HTTP server on loopback that keeps every request.
type receiver struct {
	url string
	// done is closed before the server closes, releasing handlers that
	// wait for the client to give up.
	done chan struct{}

	mu   sync.Mutex
	hits []hit
	per  map[string]int // requests per Corral-Delivery-Id
}

// newReceiver answers with answer, which is told how many requests
// (counting this one) have carried this request's Corral-Delivery-Id.
func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	t.Helper()
	rc := &receiver{done: make(chan struct{}), per: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // a short read shows as a body that differs
		id := r.Header.Get(sandbox.HeaderDeliveryID)
		rc.mu.Lock()
		rc.per[id]++
		n := rc.per[id]
		rc.hits = append(rc.hits, hit{r.Method, r.URL.Path, r.Header.Clone(), body})
		rc.mu.Unlock()
		answer(w, r, n)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(rc.done) })
	rc.url = srv.URL
	return rc
}

// status answers every request with code.
func status(code int) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(code) }
}

// hang answers nothing until the client gives up.
func (rc *receiver) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-rc.done:
	}
}

func (rc *receiver) received() []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.hits)
}

func (rc *receiver) count(deliveryID string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.per[deliveryID]
}

// refused is a loopback URL nothing listens on.
func refused(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/hook"
}

// ---- notifier ----

// start runs n until the test ends (or stop is called) and checks that Run
// returns once its context is done.
func start(t *testing.T, n *Notifier) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(ctx)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// outcomes records OnAttempt calls.
type outcomes struct {
	mu  sync.Mutex
	got []string
}

func (o *outcomes) observe(n *Notifier) {
	n.OnAttempt = func(kind string, delivered bool) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.got = append(o.got, fmt.Sprintf("%s:%v", kind, delivered))
	}
}

func (o *outcomes) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// clock is a time that moves only when told, until Resume makes it
// follow the real one.
type clock struct {
	mu      sync.Mutex
	t       time.Time
	running bool
}

func newClock() *clock { return &clock{t: time.Now().UTC()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return time.Now().UTC()
	}
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running = true
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// counting wraps c's transport to count the deliveries it sends.
func counting(c *http.Client) (*http.Client, func(id string) int) {
	var mu sync.Mutex
	sent := map[string]int{}
	base := c.Transport
	c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		sent[r.Header.Get(sandbox.HeaderDeliveryID)]++
		mu.Unlock()
		return base.RoundTrip(r)
	})
	return c, func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return sent[id]
	}
}

// checkSigned checks that h carries d as the docs promise: signed with
// secret over the exact stored body, the delivery's fixed id and the
// execution id as the Idempotency-Key.
func checkSigned(t *testing.T, h hit, d store.Delivery, secret []byte) {
	t.Helper()
	if h.method != http.MethodPost {
		t.Errorf("method %s, want POST", h.method)
	}
	if !bytes.Equal(h.body, d.Body) {
		t.Errorf("body %q, want the stored body %q", h.body, d.Body)
	}
	if err := sandbox.VerifyCallback(secret, h.header.Get(sandbox.HeaderSignature), h.body, 0); err != nil {
		t.Errorf("signature %q does not verify: %v", h.header.Get(sandbox.HeaderSignature), err)
	}
	if got := h.header.Get(sandbox.HeaderDeliveryID); got != d.ID {
		t.Errorf("%s %q, want %q", sandbox.HeaderDeliveryID, got, d.ID)
	}
	if got := h.header.Get(sandbox.HeaderIdempotent); got != d.ExecutionID {
		t.Errorf("%s %q, want the execution id %q", sandbox.HeaderIdempotent, got, d.ExecutionID)
	}
	if got := h.header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type %q", got)
	}
}

// ---- tests ----

func TestDeliversSignedPOST(t *testing.T) {
	st := newStore(t)
	rc := newReceiver(t, status(http.StatusNoContent))
	// The body goes out byte for byte as stored, not re-encoded.
	body := []byte("{ \"execution_id\": \"ex_body\",\n  \"stdout\": \"h\u00e9llo \\u2603\\n\" }\n")
	d := addDelivery(t, st, store.Delivery{ExecutionID: "ex_body", URL: rc.url + "/hook", Body: body})
	n := New(fast(), st, callbackRoutes(), quiet)
	var out outcomes
	out.observe(n)
	start(t, n)

	got := waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
	if got.Attempts != 1 || got.LastStatus != http.StatusNoContent || got.LastError != "" || !got.LeaseUntil.IsZero() {
		t.Errorf("stored %s, want 1 attempt, status 204, no error, no lease", show(got))
	}
	hits := rc.received()
	if len(hits) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(hits))
	}
	h := hits[0]
	if h.path != "/hook" {
		t.Errorf("path %q", h.path)
	}
	checkSigned(t, h, d, secrets("acme"))
	sig := h.header.Get(sandbox.HeaderSignature)
	if err := sandbox.VerifyCallback(secrets("other"), sig, h.body, 0); !errors.Is(err, sandbox.ErrBadSignature) {
		t.Errorf("another tenant's secret verifies the signature: %v", err)
	}
	if err := sandbox.VerifyCallback(secrets("acme"), sig, append(slices.Clone(h.body), ' '), 0); !errors.Is(err, sandbox.ErrBadSignature) {
		t.Errorf("the signature verifies a changed body: %v", err)
	}
	if got := h.header.Get("User-Agent"); got != "corral-notify/1" {
		t.Errorf("User-Agent %q", got)
	}
	if got, want := out.list(), []string{"callback:true"}; !slices.Equal(got, want) {
		t.Errorf("OnAttempt %v, want %v", got, want)
	}
}

// Every failure that is not a 2xx is retried: docs/api.md ("retried with
// exponential backoff and jitter until a 2xx") and docs/production.md
// ("Non-2xx answers and timeouts are retried"), so a 4xx is not permanent.
func TestRetriesUntil2xx(t *testing.T) {
	tests := []struct {
		name string
		fail func(rc *receiver, w http.ResponseWriter, r *http.Request)
		// wantStatus and wantErr are what the first failed attempt
		// records.
		wantStatus int
		wantErr    string
	}{
		{"503", func(_ *receiver, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) },
			503, "receiver answered 503 Service Unavailable"},
		{"500", func(_ *receiver, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) },
			500, "receiver answered 500 Internal Server Error"},
		{"400", func(_ *receiver, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(400) },
			400, "receiver answered 400 Bad Request"},
		{"410", func(_ *receiver, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(410) },
			410, "receiver answered 410 Gone"},
		{"timeout", func(rc *receiver, _ http.ResponseWriter, r *http.Request) { rc.hang(r) },
			0, "context deadline exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := observe(newStore(t))
			var rc *receiver
			rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n <= 2 {
					tt.fail(rc, w, r)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			d := addDelivery(t, st, store.Delivery{URL: rc.url})
			cfg := fast()
			cfg.Timeout = 100 * time.Millisecond
			// The clock stands still until the first failure is seen.
			clk := newClock()
			n := New(cfg, st, callbackRoutes(), quiet)
			n.now = clk.Now
			var out outcomes
			out.observe(n)
			start(t, n)

			first := waitStored(t, st, d, "one attempt", attempted(1))
			if first.State != store.DeliveryPending || first.LastStatus != tt.wantStatus ||
				!strings.Contains(first.LastError, tt.wantErr) || !first.LeaseUntil.IsZero() {
				t.Errorf("after the first attempt: %s; want pending, status %d, error %q, no lease",
					show(first), tt.wantStatus, tt.wantErr)
			}
			if !first.NextAttempt.After(clk.Now()) {
				t.Errorf("next attempt %v not after the failure at %v", first.NextAttempt, clk.Now())
			}
			clk.Resume()

			got := waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
			if got.Attempts != 3 || got.LastStatus != 200 || got.LastError != "" {
				t.Errorf("stored %s, want 3 attempts, status 200, no error", show(got))
			}
			hits := rc.received()
			if len(hits) != 3 {
				t.Fatalf("receiver got %d requests, want 3", len(hits))
			}
			for _, h := range hits {
				checkSigned(t, h, d, secrets("acme"))
			}
			if got, want := out.list(), []string{"callback:false", "callback:false", "callback:true"}; !slices.Equal(got, want) {
				t.Errorf("OnAttempt %v, want %v", got, want)
			}
		})
	}
}

func TestGivesUpAfterMaxAttempts(t *testing.T) {
	tests := []struct {
		name       string
		answer     func(rc *receiver) func(http.ResponseWriter, *http.Request, int)
		url        func(t *testing.T, rc *receiver) string
		wantStatus int
		wantErr    string
		wantHits   int
	}{
		{name: "503", answer: func(*receiver) func(http.ResponseWriter, *http.Request, int) { return status(503) },
			wantStatus: 503, wantErr: "receiver answered 503 Service Unavailable", wantHits: 3},
		{name: "403", answer: func(*receiver) func(http.ResponseWriter, *http.Request, int) { return status(403) },
			wantStatus: 403, wantErr: "receiver answered 403 Forbidden", wantHits: 3},
		{name: "timeout", answer: func(rc *receiver) func(http.ResponseWriter, *http.Request, int) {
			return func(_ http.ResponseWriter, r *http.Request, _ int) { rc.hang(r) }
		}, wantErr: "context deadline exceeded", wantHits: 3},
		{name: "connection refused", url: func(t *testing.T, _ *receiver) string { return refused(t) },
			wantErr: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := observe(newStore(t))
			var rc *receiver
			rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if tt.answer == nil {
					t.Error("a request reached the receiver")
					return
				}
				tt.answer(rc)(w, r, n)
			})
			url := rc.url
			if tt.url != nil {
				url = tt.url(t, rc)
			}
			d := addDelivery(t, st, store.Delivery{URL: url})
			cfg := fast()
			cfg.MaxAttempts, cfg.Timeout = 3, 100*time.Millisecond
			n := New(cfg, st, callbackRoutes(), quiet)
			var out outcomes
			out.observe(n)
			start(t, n)

			got := waitStored(t, st, d, "failed", inState(store.DeliveryFailed))
			if got.Attempts != 3 || got.LastStatus != tt.wantStatus || !strings.Contains(got.LastError, tt.wantErr) ||
				!got.LeaseUntil.IsZero() {
				t.Errorf("stored %s; want 3 attempts, status %d, error %q, no lease", show(got), tt.wantStatus, tt.wantErr)
			}
			// A failed delivery is never claimed again.
			st.waitClaims(t, 3)
			if c := st.timesClaimed(d.ID); c != 3 {
				t.Errorf("claimed %d times, want 3", c)
			}
			if c := rc.count(d.ID); c != tt.wantHits {
				t.Errorf("receiver got %d requests, want %d", c, tt.wantHits)
			}
			if got, want := out.list(), []string{"callback:false", "callback:false", "callback:false"}; !slices.Equal(got, want) {
				t.Errorf("OnAttempt %v, want %v", got, want)
			}
		})
	}
}

// The delay after the nth failure is BaseDelay·2^(n-1), capped at
// MaxDelay, ±20%, and nothing is sent before it is due. The clock is
// fake, so the delays can be hours.
func TestBackoffBetweenAttempts(t *testing.T) {
	st := observe(newStore(t))
	rc := newReceiver(t, status(http.StatusBadGateway))
	d := addDelivery(t, st, store.Delivery{URL: rc.url})
	cfg := fast()
	cfg.BaseDelay, cfg.MaxDelay = time.Hour, 3*time.Hour
	clk := newClock()
	n := New(cfg, st, callbackRoutes(), quiet)
	n.now = clk.Now
	start(t, n)

	nominal := []time.Duration{time.Hour, 2 * time.Hour, 3 * time.Hour, 3 * time.Hour}
	for i, want := range nominal {
		got := waitStored(t, st, d, fmt.Sprintf("attempt %d", i+1), attempted(i+1))
		if got.Attempts != i+1 || got.State != store.DeliveryPending || got.LastStatus != 502 {
			t.Fatalf("after attempt %d: %s", i+1, show(got))
		}
		// Both times come from one reading of the clock, truncated to
		// microseconds by the store.
		gap := got.NextAttempt.Sub(got.UpdatedAt)
		lo, hi := time.Duration(0.8*float64(want))-time.Microsecond, time.Duration(1.2*float64(want))+time.Microsecond
		if gap < lo || gap > hi {
			t.Errorf("delay after attempt %d: %v, want %v ±20%%", i+1, gap, want)
		}
		// While the clock stands still it is not due: claims pass it by.
		n.Wake()
		st.waitClaims(t, 3)
		if c := st.timesClaimed(d.ID); c != i+1 {
			t.Fatalf("claimed %d times before it was due, want %d", c, i+1)
		}
		if c := rc.count(d.ID); c != i+1 {
			t.Fatalf("receiver got %d requests before it was due, want %d", c, i+1)
		}
		clk.Set(got.NextAttempt)
		n.Wake()
	}
	got := waitStored(t, st, d, "failed", inState(store.DeliveryFailed))
	if got.Attempts != cfg.MaxAttempts || rc.count(d.ID) != cfg.MaxAttempts {
		t.Errorf("gave up after %d attempts (%d received), want %d", got.Attempts, rc.count(d.ID), cfg.MaxAttempts)
	}
}

func TestBackoffJitter(t *testing.T) {
	n := New(Config{BaseDelay: time.Second, MaxDelay: time.Minute}, nil, nil, quiet)
	for attempts := 1; attempts <= 40; attempts++ {
		want := min(time.Second<<min(attempts-1, 20), time.Minute)
		lo, hi := 2.0, 0.0
		for range 200 {
			r := float64(n.backoff(attempts)) / float64(want)
			if r < 0.8 || r > 1.2 {
				t.Fatalf("backoff(%d) = %v, want %v ±20%%", attempts, n.backoff(attempts), want)
			}
			lo, hi = min(lo, r), max(hi, r)
		}
		// 200 draws all within ±10% would be a 0.5^200 event.
		if lo > 0.9 || hi < 1.1 {
			t.Errorf("backoff(%d) spread %.3f..%.3f of %v: no jitter", attempts, lo, hi, want)
		}
	}
}

// Two nodes on one database: each delivery is leased to one of them at a
// time, so no receiver sees the same delivery twice at once, and each is
// sent exactly as often as its answers require.
func TestTwoNotifiersNeverSendTheSameDeliveryAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "corral.db")
	a, b := openStore(t, path), openStore(t, path)
	var (
		mu       sync.Mutex
		inFlight = map[string]int{}
		overlaps []string
	)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		id := r.Header.Get(sandbox.HeaderDeliveryID)
		mu.Lock()
		inFlight[id]++
		if inFlight[id] > 1 {
			overlaps = append(overlaps, id)
		}
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // widens the window an overlap would need
		mu.Lock()
		inFlight[id]--
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	var ds []store.Delivery
	for range 40 {
		ds = append(ds, addDelivery(t, a, store.Delivery{URL: rc.url}))
	}
	cfg := fast()
	cfg.Poll = time.Millisecond
	ca, sentA := counting(loopback())
	cb, sentB := counting(loopback())
	na := New(cfg, a, map[string]Route{store.KindCallback: {Client: ca, Secret: secrets}}, quiet)
	nb := New(cfg, b, map[string]Route{store.KindCallback: {Client: cb, Secret: secrets}}, quiet)
	start(t, na)
	start(t, nb)

	var byA, byB int
	for _, d := range ds {
		got := waitStored(t, a, d, "delivered", inState(store.DeliveryDelivered))
		if got.Attempts != 2 {
			t.Errorf("%s: %d attempts recorded, want 2", d.ID, got.Attempts)
		}
		if c := rc.count(d.ID); c != 2 {
			t.Errorf("%s: received %d times, want 2", d.ID, c)
		}
		byA, byB = byA+sentA(d.ID), byB+sentB(d.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("sent twice at once: %v", overlaps)
	}
	t.Logf("attempts by node a: %d, by node b: %d", byA, byB)
}

// A receiver that answered counts even when the notifier is told to stop
// at that moment (commit e571813): its answer is recorded, not left to
// the lease.
func TestShutdownRecordsAnAnsweredAttempt(t *testing.T) {
	for _, code := range []int{http.StatusServiceUnavailable, http.StatusOK} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			st := newStore(t)
			rc := newReceiver(t, status(code))
			d := addDelivery(t, st, store.Delivery{URL: rc.url})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := loopback()
			base := c.Transport
			// Stop the notifier the moment the receiver's answer is in.
			c.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := base.RoundTrip(r)
				cancel()
				return resp, err
			})
			n := New(fast(), st, map[string]Route{store.KindCallback: {Client: c, Secret: secrets}}, quiet)
			var out outcomes
			out.observe(n)
			ran := make(chan struct{})
			go func() {
				defer close(ran)
				n.Run(ctx) // returns after its attempts have finished
			}()
			select {
			case <-ran:
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}

			got := stored(t, st, d)
			want := store.DeliveryPending
			if code == http.StatusOK {
				want = store.DeliveryDelivered
			}
			if got.Attempts != 1 || got.LastStatus != code || got.State != want || !got.LeaseUntil.IsZero() {
				t.Errorf("stored %s; want 1 attempt, status %d, %s, no lease", show(got), code, want)
			}
			if len(out.list()) != 1 {
				t.Errorf("OnAttempt %v, want one call", out.list())
			}
		})
	}
}

// A send cut off by shutdown before any answer is not an attempt: nothing
// is recorded, and the delivery stays leased until the lease runs out,
// when any notifier sends it.
func TestShutdownMidSendLeavesItToTheLease(t *testing.T) {
	st := newStore(t)
	arrived := make(chan struct{}, 1)
	var rc *receiver
	rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			arrived <- struct{}{}
			rc.hang(r)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	d := addDelivery(t, st, store.Delivery{URL: rc.url})
	n := New(fast(), st, callbackRoutes(), quiet)
	var out outcomes
	out.observe(n)
	stop := start(t, n)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the receiver got no request")
	}
	stop()

	got := stored(t, st, d)
	if got.Attempts != 0 || got.LastStatus != 0 || got.LastError != "" || got.State != store.DeliveryPending {
		t.Errorf("stored %s; want nothing recorded", show(got))
	}
	if !got.LeaseUntil.After(time.Now()) {
		t.Errorf("lease %v has ended; want it held", got.LeaseUntil)
	}
	if len(out.list()) != 0 {
		t.Errorf("OnAttempt %v, want no call", out.list())
	}

	// Another node, once the lease has run out.
	clk := &clock{t: got.LeaseUntil}
	other := New(fast(), st, callbackRoutes(), quiet)
	other.now = clk.Now
	start(t, other)
	got = waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
	if got.Attempts != 1 || rc.count(d.ID) != 2 {
		t.Errorf("stored %s after %d requests; want 1 attempt after 2", show(got), rc.count(d.ID))
	}
}

// Each kind goes by its own route: its client, and its secret (the
// tenant's callback secret, or the memory service's one secret).
func TestRoutesPerKind(t *testing.T) {
	st := newStore(t)
	rc := newReceiver(t, status(http.StatusOK))
	memSecret := []byte("memory-secret")
	cbClient, viaCallback := counting(loopback())
	memClient, viaMemory := counting(loopback())
	var memTenants []string
	var mu sync.Mutex
	routes := map[string]Route{
		store.KindCallback: {Client: cbClient, Secret: secrets},
		store.KindMemory: {Client: memClient, Secret: func(tenant string) []byte {
			mu.Lock()
			defer mu.Unlock()
			memTenants = append(memTenants, tenant)
			return memSecret
		}},
	}
	acme := addDelivery(t, st, store.Delivery{URL: rc.url + "/cb", Tenant: "acme"})
	beta := addDelivery(t, st, store.Delivery{URL: rc.url + "/cb", Tenant: "beta"})
	mem := addDelivery(t, st, store.Delivery{URL: rc.url + "/memory", Tenant: "beta", Kind: store.KindMemory,
		Body: []byte(`{"tenant":"beta","execution_id":"x","summary":"ok"}`)})
	n := New(fast(), st, routes, quiet)
	start(t, n)
	for _, d := range []store.Delivery{acme, beta, mem} {
		waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
	}

	byID := map[string]hit{}
	for _, h := range rc.received() {
		byID[h.header.Get(sandbox.HeaderDeliveryID)] = h
	}
	for _, tt := range []struct {
		d          store.Delivery
		secret     []byte
		notSecrets [][]byte
		path       string
		viaOwn     func(string) int
		viaOther   func(string) int
	}{
		{acme, secrets("acme"), [][]byte{secrets("beta"), memSecret}, "/cb", viaCallback, viaMemory},
		{beta, secrets("beta"), [][]byte{secrets("acme"), memSecret}, "/cb", viaCallback, viaMemory},
		{mem, memSecret, [][]byte{secrets("beta"), secrets("acme")}, "/memory", viaMemory, viaCallback},
	} {
		h, ok := byID[tt.d.ID]
		if !ok {
			t.Errorf("%s: not received", tt.d.ID)
			continue
		}
		checkSigned(t, h, tt.d, tt.secret)
		for _, s := range tt.notSecrets {
			if err := sandbox.VerifyCallback(s, h.header.Get(sandbox.HeaderSignature), h.body, 0); err == nil {
				t.Errorf("%s: signature verifies with %q too", tt.d.ID, s)
			}
		}
		if h.path != tt.path {
			t.Errorf("%s: sent to %s, want %s", tt.d.ID, h.path, tt.path)
		}
		if tt.viaOwn(tt.d.ID) != 1 || tt.viaOther(tt.d.ID) != 0 {
			t.Errorf("%s: sent %d times by its route's client and %d by the other's; want 1 and 0",
				tt.d.ID, tt.viaOwn(tt.d.ID), tt.viaOther(tt.d.ID))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(memTenants, []string{"beta"}) {
		t.Errorf("memory secret asked for tenants %v, want [beta]", memTenants)
	}
}

// A node without a usable route for a kind records a failed attempt; the
// delivery is retried, and another node with the route sends it.
func TestNoRouteIsAFailedAttempt(t *testing.T) {
	for name, routes := range map[string]map[string]Route{
		"no route":     callbackRoutes(),
		"no client":    {store.KindMemory: {Secret: secrets}},
		"no secret":    {store.KindMemory: {Client: loopback()}},
		"empty routes": nil,
	} {
		t.Run(name, func(t *testing.T) {
			st := observe(newStore(t))
			rc := newReceiver(t, status(http.StatusOK))
			d := addDelivery(t, st, store.Delivery{URL: rc.url, Kind: store.KindMemory})
			clk := newClock() // stands still: one attempt, then not due
			n := New(fast(), st, routes, quiet)
			n.now = clk.Now
			var out outcomes
			out.observe(n)
			stop := start(t, n)
			got := waitStored(t, st, d, "one attempt", attempted(1))
			if got.State != store.DeliveryPending || got.LastStatus != 0 ||
				!strings.Contains(got.LastError, "memory: no route on this node") {
				t.Errorf("stored %s; want pending, status 0, a no-route error", show(got))
			}
			if rc.count(d.ID) != 0 {
				t.Error("sent without a route")
			}
			st.waitClaims(t, 1)
			stop()
			if got, want := out.list(), []string{"memory:false"}; !slices.Equal(got, want) {
				t.Errorf("OnAttempt %v, want %v", got, want)
			}

			other := New(fast(), st, map[string]Route{store.KindMemory: {Client: loopback(), Secret: secrets}}, quiet)
			start(t, other)
			got = waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
			if got.Attempts != 2 || rc.count(d.ID) != 1 {
				t.Errorf("stored %s after %d requests; want 2 attempts, 1 request", show(got), rc.count(d.ID))
			}
		})
	}
}

// Wake makes a due delivery go out at once: the poll interval is an hour,
// so nothing else could send it within the test.
func TestWakeSendsWithoutWaitingForThePoll(t *testing.T) {
	st := observe(newStore(t))
	rc := newReceiver(t, status(http.StatusOK))
	cfg := fast()
	cfg.Poll = time.Hour
	n := New(cfg, st, callbackRoutes(), quiet)
	start(t, n)
	waitFor(t, "Run's first look", func() bool { return st.claimCount() > 0 })
	for range 3 {
		d := addDelivery(t, st, store.Delivery{URL: rc.url})
		n.Wake()
		waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
	}
	// Wake never blocks, whether Run is looking or not.
	idle := New(cfg, st, nil, quiet)
	for range 10 {
		idle.Wake()
	}
}

// More due deliveries than one claim takes are all sent, without waiting
// for the next poll.
func TestDrainsMoreThanOneClaim(t *testing.T) {
	st := newStore(t)
	rc := newReceiver(t, status(http.StatusOK))
	var ds []store.Delivery
	for range 70 { // three claims of at most 32
		ds = append(ds, addDelivery(t, st, store.Delivery{URL: rc.url}))
	}
	cfg := fast()
	cfg.Poll = time.Hour
	start(t, New(cfg, st, callbackRoutes(), quiet))
	for _, d := range ds {
		waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
	}
	if got := len(rc.received()); got != len(ds) {
		t.Errorf("receiver got %d requests, want %d", got, len(ds))
	}
}

// With the production client and its default policy, a loopback receiver
// is refused when dialled, and the refusal is the attempt's error.
func TestGuardRefusesAPrivateReceiver(t *testing.T) {
	st := newStore(t)
	rc := newReceiver(t, status(http.StatusOK))
	d := addDelivery(t, st, store.Delivery{URL: rc.url})
	cfg := fast()
	cfg.MaxAttempts = 2
	routes := map[string]Route{store.KindCallback: {Client: netpolicy.Guard{}.Client(time.Minute), Secret: secrets}}
	start(t, New(cfg, st, routes, quiet))

	got := waitStored(t, st, d, "failed", inState(store.DeliveryFailed))
	if got.Attempts != 2 || got.LastStatus != 0 ||
		!strings.Contains(got.LastError, netpolicy.ErrForbidden.Error()) || !strings.Contains(got.LastError, "127.0.0.1") {
		t.Errorf("stored %s; want 2 attempts, status 0, the guard's refusal of 127.0.0.1", show(got))
	}
	if len(rc.received()) != 0 {
		t.Error("the receiver was reached")
	}
}

// A store that is away delays deliveries and loses none. A claim that
// fails is logged and tried again at the next poll. An outcome that cannot
// be recorded is logged; the delivery stays leased, and once the lease has
// run out it is sent again with the same Corral-Delivery-Id, which is why
// receivers de-duplicate.
func TestStoreOutageLosesNothing(t *testing.T) {
	st := observe(newStore(t))
	st.failClaims, st.failUpdates = 3, 1
	rc := newReceiver(t, status(http.StatusOK))
	d := addDelivery(t, st, store.Delivery{URL: rc.url})
	var logs syncBuffer
	clk := newClock()
	n := New(fast(), st, callbackRoutes(), slog.New(slog.NewTextHandler(&logs, nil)))
	n.now = clk.Now
	start(t, n)

	waitFor(t, "the outcome to be lost", func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.failed == 1
	})
	if got := stored(t, st, d); got.Attempts != 0 || got.State != store.DeliveryPending || !got.LeaseUntil.After(clk.Now()) {
		t.Errorf("after a lost outcome: %s; want no attempt recorded and the lease held", show(got))
	}
	st.waitClaims(t, 2)
	if c := rc.count(d.ID); c != 1 {
		t.Fatalf("sent %d times while leased, want 1", c)
	}
	clk.Set(clk.Now().Add(fast().Lease))
	n.Wake()
	got := waitStored(t, st, d, "delivered", inState(store.DeliveryDelivered))
	if got.Attempts != 1 || rc.count(d.ID) != 2 {
		t.Errorf("stored %s after %d requests; want 1 attempt recorded, 2 requests", show(got), rc.count(d.ID))
	}
	for _, h := range rc.received() {
		if h.header.Get(sandbox.HeaderDeliveryID) != d.ID {
			t.Errorf("a resend carries %s %q", sandbox.HeaderDeliveryID, h.header.Get(sandbox.HeaderDeliveryID))
		}
	}
	for _, want := range []string{`level=WARN msg="claim deliveries"`, `level=ERROR msg="record delivery attempt" delivery_id=` + d.ID} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// show is what a failure message needs of d.
func show(d store.Delivery) string {
	return fmt.Sprintf("{state %s, attempts %d, status %d, error %q, next %s, lease %s}", d.State, d.Attempts,
		d.LastStatus, d.LastError, d.NextAttempt.Format(time.RFC3339Nano), d.LeaseUntil.Format(time.RFC3339Nano))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A URL the request cannot be built from is a failed attempt, not a crash
// or a delivery stuck in its lease.
func TestUnusableURLIsAFailedAttempt(t *testing.T) {
	st := newStore(t)
	d := addDelivery(t, st, store.Delivery{URL: "http://[::1"})
	cfg := fast()
	cfg.MaxAttempts = 1
	start(t, New(cfg, st, callbackRoutes(), quiet))
	got := waitStored(t, st, d, "failed", inState(store.DeliveryFailed))
	if got.Attempts != 1 || !strings.Contains(got.LastError, "build request") {
		t.Errorf("stored %s; want 1 attempt failing to build the request", show(got))
	}
}

// A redirect that keeps the method (307, 308) is followed: the new
// location gets the same signed POST. One that turns it into a GET (301,
// 302, 303) is not a delivery, whatever the GET is answered: the receiver
// never saw the body. It is retried like any other non-2xx answer.
func TestRedirects(t *testing.T) {
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			st := newStore(t)
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				if r.URL.Path == "/hook" {
					http.Redirect(w, r, "/moved", code)
				}
				// Anything at /moved answers 200, a GET included.
			})
			d := addDelivery(t, st, store.Delivery{URL: rc.url + "/hook"})
			cfg := fast()
			cfg.MaxAttempts = 1
			start(t, New(cfg, st, callbackRoutes(), quiet))
			got := waitStored(t, st, d, "an attempt", attempted(1))

			if code == 307 || code == 308 {
				if got.State != store.DeliveryDelivered || got.LastStatus != 200 {
					t.Errorf("stored %s; want delivered, status 200", show(got))
				}
				hits := rc.received()
				if len(hits) != 2 || hits[1].path != "/moved" {
					t.Fatalf("receiver got %+v; want /hook then /moved", hits)
				}
				checkSigned(t, hits[1], d, secrets("acme"))
				return
			}
			want := fmt.Sprintf("receiver answered %d %s", code, http.StatusText(code))
			if got.State != store.DeliveryFailed || got.LastStatus != code || got.LastError != want {
				t.Errorf("stored %s; want failed, status %d, error %q", show(got), code, want)
			}
			for _, h := range rc.received() {
				if h.method != http.MethodPost {
					t.Errorf("receiver got a %s %s", h.method, h.path)
				}
			}
		})
	}
}

// Redirects that keep the POST still follow the route client's own
// policy, or http.Client's default when it has none.
func TestRedirectLimit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		client  *http.Client
		wantErr string
	}{
		{"guard", loopback(), fmt.Sprintf("stopped after %d redirects", netpolicy.MaxRedirects)},
		{"default policy", &http.Client{}, "stopped after 10 redirects"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := newStore(t)
			rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				http.Redirect(w, r, r.URL.Path+"x", http.StatusTemporaryRedirect)
			})
			d := addDelivery(t, st, store.Delivery{URL: rc.url + "/x"})
			cfg := fast()
			cfg.MaxAttempts = 1
			start(t, New(cfg, st, map[string]Route{store.KindCallback: {Client: tt.client, Secret: secrets}}, quiet))
			got := waitStored(t, st, d, "failed", inState(store.DeliveryFailed))
			if !strings.Contains(got.LastError, tt.wantErr) {
				t.Errorf("stored %s; want error %q", show(got), tt.wantErr)
			}
		})
	}
}

// DefaultConfig keeps what its comment and docs/production.md ("about half
// an hour with the defaults") say.
func TestDefaultConfig(t *testing.T) {
	cfg := DefaultConfig()
	var span time.Duration
	for attempts := 1; attempts < cfg.MaxAttempts; attempts++ {
		span += min(cfg.BaseDelay<<(attempts-1), cfg.MaxDelay)
	}
	if cfg.MaxAttempts != 12 || span < 30*time.Minute || span > 40*time.Minute {
		t.Errorf("%d attempts over %v, want 12 over about half an hour", cfg.MaxAttempts, span)
	}
	// An attempt that outlived its lease could be claimed and sent again
	// by another node while still under way.
	if cfg.Timeout >= cfg.Lease {
		t.Errorf("Timeout %v is not within Lease %v", cfg.Timeout, cfg.Lease)
	}
}

// However large the base delay and the attempt count, the delay doubles up
// to MaxDelay and stays there; the doubling never overflows into a short
// delay.
func TestBackoffCap(t *testing.T) {
	for _, tt := range []struct {
		base     time.Duration
		attempts int
		want     time.Duration
	}{
		{time.Second, 11, 1024 * time.Second},
		{time.Second, 12, 30 * time.Minute},
		{time.Second, 1000, 30 * time.Minute},
		{10 * time.Second, 40, 30 * time.Minute},
		// 2^34+1 ns shifted left by 30 wraps to 2^30 ns, about a second.
		{1<<34 + 1, 31, 30 * time.Minute},
		{1<<34 + 1, 64, 30 * time.Minute},
		{time.Hour, 1, 30 * time.Minute},
	} {
		n := New(Config{BaseDelay: tt.base, MaxDelay: 30 * time.Minute}, nil, nil, quiet)
		for range 20 {
			if got := n.backoff(tt.attempts); got < tt.want*8/10 || got > tt.want*12/10 {
				t.Errorf("base %v: backoff(%d) = %v, want %v ±20%%", tt.base, tt.attempts, got, tt.want)
				break
			}
		}
	}
}
