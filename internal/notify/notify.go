// Package notify delivers signed POSTs — execution callbacks and execution
// summaries for a memory service, one mechanism for both — from deliveries
// persisted in the store: exponential backoff with jitter, the same
// Idempotency-Key on every attempt, and nothing lost across restarts or node
// failures (a delivery is leased while a node sends it).
package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// Config tunes delivery.
type Config struct {
	// MaxAttempts before a delivery is given up (failed).
	MaxAttempts int
	// BaseDelay is the first retry's delay; each retry doubles it, up to
	// MaxDelay, with ±20% jitter.
	BaseDelay, MaxDelay time.Duration
	// Timeout bounds one attempt.
	Timeout time.Duration
	// Poll is how often due deliveries are looked for without a Wake.
	Poll time.Duration
	// Lease is how long a claimed delivery is reserved for this node.
	Lease time.Duration
}

// DefaultConfig: 12 attempts over about half an hour (delays of 1 s
// doubling to 17 min, 34 min in all before jitter). An attempt's Timeout
// ends well within its Lease, so no other node claims a delivery while
// it is being sent.
func DefaultConfig() Config {
	return Config{MaxAttempts: 12, BaseDelay: time.Second, MaxDelay: 30 * time.Minute,
		Timeout: 10 * time.Second, Poll: time.Second, Lease: time.Minute}
}

// Secrets returns the signing secret of a tenant's deliveries.
type Secrets func(tenant string) []byte

// Route is how deliveries of one kind (store.KindCallback,
// store.KindMemory) are sent.
type Route struct {
	// Client sends them; it should refuse destinations the policy
	// forbids (netpolicy.Guard).
	Client *http.Client
	// Secret returns the key that signs a tenant's deliveries.
	Secret Secrets
}

// Notifier sends due deliveries. Run owns its goroutines.
type Notifier struct {
	cfg    Config
	store  store.Store
	routes map[string]Route
	log    *slog.Logger
	wake   chan struct{}
	now    func() time.Time

	// OnAttempt, if set, observes every attempt's outcome (metrics).
	OnAttempt func(kind string, delivered bool)
}

// New returns a notifier that sends each kind of delivery by its route. A
// delivery of a kind this node has no route for (its use is configured on
// other nodes, or was configured away) is a failed attempt like any other:
// retried later, perhaps by another node, until MaxAttempts.
func New(cfg Config, st store.Store, routes map[string]Route, log *slog.Logger) *Notifier {
	return &Notifier{cfg: cfg, store: st, routes: routes, log: log,
		wake: make(chan struct{}, 1), now: time.Now}
}

// Wake makes Run look for due deliveries now.
func (n *Notifier) Wake() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	t := time.NewTicker(n.cfg.Poll)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		ds, err := n.store.ClaimDeliveries(ctx, n.now(), n.cfg.Lease, 32)
		if err != nil && ctx.Err() == nil {
			n.log.Warn("claim deliveries", "err", err)
		}
		for _, d := range ds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n.attempt(ctx, d)
			}()
		}
		if len(ds) == 32 {
			continue // more may be due
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.wake:
		}
	}
}

// attempt sends d once and records the outcome.
func (n *Notifier) attempt(ctx context.Context, d store.Delivery) {
	status, err := n.send(ctx, d)
	if status == 0 && ctx.Err() != nil {
		return // shut down mid-send: the lease expires and another attempt follows
	}
	// A receiver that answered counts, even if we are shutting down now.
	now := n.now()
	d.Attempts++
	d.LastStatus = status
	d.UpdatedAt = now
	d.LeaseUntil = time.Time{}
	delivered := err == nil
	if delivered {
		d.State, d.LastError = store.DeliveryDelivered, ""
	} else {
		d.LastError = err.Error()
		if d.Attempts >= n.cfg.MaxAttempts {
			d.State = store.DeliveryFailed
		} else {
			d.NextAttempt = now.Add(n.backoff(d.Attempts))
		}
	}
	if n.OnAttempt != nil {
		n.OnAttempt(d.Kind, delivered)
	}
	if err := n.store.UpdateDelivery(context.WithoutCancel(ctx), d); err != nil {
		n.log.Error("record delivery attempt", "delivery_id", d.ID, "execution_id", d.ExecutionID, "err", err)
		return
	}
	n.log.Info("delivery attempt", "delivery_id", d.ID, "execution_id", d.ExecutionID, "kind", d.Kind,
		"attempt", d.Attempts, "status", status, "state", d.State, "err", d.LastError)
}

// backoff is the delay after the nth failed attempt.
func (n *Notifier) backoff(attempts int) time.Duration {
	d := n.cfg.BaseDelay
	if d <= 0 || d > n.cfg.MaxDelay {
		d = n.cfg.MaxDelay
	}
	for i := 1; i < attempts && d < n.cfg.MaxDelay; i++ {
		d += min(d, n.cfg.MaxDelay-d) // doubled, up to MaxDelay, never past it
	}
	jitter := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * jitter)
}

// errNoRoute: this node does not send the delivery's kind.
var errNoRoute = errors.New("no route on this node for deliveries of this kind")

func (n *Notifier) send(ctx context.Context, d store.Delivery) (int, error) {
	route, ok := n.routes[d.Kind]
	if !ok || route.Client == nil || route.Secret == nil {
		return 0, fmt.Errorf("%s: %w", d.Kind, errNoRoute)
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "corral-notify/1")
	req.Header.Set(sandbox.HeaderSignature, sandbox.SignCallback(route.Secret(d.Tenant), n.now(), d.Body))
	req.Header.Set(sandbox.HeaderDeliveryID, d.ID)
	req.Header.Set(sandbox.HeaderIdempotent, d.ExecutionID)
	resp, err := keepPOST(route.Client).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("receiver answered %s", resp.Status)
	}
	return resp.StatusCode, nil
}

// keepPOST is c, except that a redirect that would turn the POST into a
// GET (301, 302, 303) is not followed: that 3xx is the answer, a failed
// attempt. Followed, it would send no body, and a 2xx to the GET would
// count as a delivery the receiver never saw. 307 and 308 keep the method
// and body and are followed under c's own policy.
func keepPOST(c *http.Client) *http.Client {
	kept := *c
	kept.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.Method != via[0].Method {
			return http.ErrUseLastResponse
		}
		if c.CheckRedirect != nil {
			return c.CheckRedirect(req, via)
		}
		if len(via) >= 10 { // http.Client's default policy
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &kept
}
