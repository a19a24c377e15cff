// Package pool keeps sandboxes ready so that an execution does not wait for
// one to be created: per configured (image, tier) class, a number of idle
// sandboxes (optionally running a pre-started interpreter, a zygote) that
// follows demand between a minimum and a maximum.
//
// A claim is served by an idle sandbox only when it matches the request
// exactly (tier, image, mounts, overlays and the limits fixed at creation);
// the request's memory and CPU limits are then applied to it, and one that
// holds more memory than they leave room for is replaced. Anything else is
// a cold start, never a weaker sandbox.
//
// After an execution a sandbox is reset — every process but the zygote
// killed, /workspace, /tmp, /dev/shm and IPC emptied, inherited limits
// checked, the zygote pinged — and kept for the same tenant only, up to
// MaxUses executions. A sandbox whose execution timed out, was cancelled,
// hit a kernel limit or whose reset fails is destroyed. MaxUses 1 destroys
// every sandbox after one execution.
package pool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/metrics"
	"github.com/corralhq/corral/internal/runtime"
)

// Warm is one class of sandboxes to keep ready.
type Warm struct {
	// Image names the image (empty: the language's default image).
	Image string
	Tier  runtime.Tier
	// Language is the language the sandboxes are made for (its caches
	// decide the spec) and, with Zygote, whose interpreter is pre-started.
	// Default python.
	Language string
	// MinIdle sandboxes are always ready; up to MaxIdle when claims miss.
	MinIdle, MaxIdle int
	// Zygote runs a pre-started interpreter that imports Preload.
	Zygote  bool
	Preload []string
	// System keeps live sandboxes ready (runtime.Spec.System): only a
	// live sandbox's create claims them, and no execution does.
	System bool
}

// Config configures a pool.
type Config struct {
	Warm []Warm
	// MaxUses is how many executions a sandbox serves before it is
	// destroyed (1: one).
	MaxUses int
	// IdleTimeout: a sandbox idle for longer is destroyed when the class
	// holds more than MinIdle, and a used sandbox always (its tenant is
	// gone).
	IdleTimeout time.Duration
	// Headroom is the memory a claim's limit must leave above what the
	// idle sandbox already uses (its zygote).
	Headroom int64
	// ReturnWait is how long a claim that finds nothing idle waits for one
	// of its tenant's sandboxes still being reset, before a cold start.
	ReturnWait time.Duration
}

// DefaultConfig returns a pool with no classes.
func DefaultConfig() Config {
	return Config{MaxUses: 1000, IdleTimeout: 5 * time.Minute, Headroom: 32 << 20, ReturnWait: 500 * time.Millisecond}
}

// Interpreters is what the pool needs of the engine: the spec of a class's
// sandboxes, and the pre-started interpreter of a language.
type Interpreters interface {
	WarmSpec(ctx context.Context, tier runtime.Tier, language, image string, system bool) (runtime.Spec, images.Image, error)
	StartZygote(ctx context.Context, sb runtime.Sandbox, language string, img images.Image, preload []string) (*fleet.Zygote, error)
}

// Pool lends warm sandboxes of its fleet. It is safe for concurrent use.
type Pool struct {
	fleet *fleet.Fleet
	e     Interpreters
	cfg   Config
	m     *metrics.Metrics
	log   *slog.Logger
	// now is the clock that ages idle sandboxes and misses (time.Now; a
	// test's own, to expire them without waiting).
	now func() time.Time

	// cmu guards classes, which grow when a tier arrives (AddTier), and
	// closed. A classes slice is never modified once published, so a
	// reader may keep it.
	cmu     sync.RWMutex
	classes []*class
	closed  bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type class struct {
	index int // in Config.Warm
	warm  Warm
	key   string
	fixed runtime.Limits
	spec  runtime.Spec
	img   images.Image

	mu       sync.Mutex
	idle     []*member // most recently released last
	creating int
	// lent counts the class's sandboxes out with an execution: with the
	// ones being reset, they come back to idle (see wantsFresh). out counts
	// them per tenant.
	lent     int
	out      map[string]int
	target   int // idle sandboxes wanted, between MinIdle and MaxIdle
	lastMiss time.Time
	kick     chan struct{}
	// resetting counts, per tenant, its sandboxes on their way back to
	// idle; back is closed (and replaced) whenever one arrives or fails.
	resetting map[string]int
	back      chan struct{}
}

type member struct {
	sb     runtime.Sandbox
	zygote *fleet.Zygote
	owner  string // the tenant it served; "" while fresh
	uses   int
	idleAt time.Time
	// cpu is the CPU its zygote keeps to (where it started, or where a
	// reset moved it: placeLocked), or -1.
	cpu int
}

// New resolves each class's image and spec and starts filling the pool. A
// class that cannot be served here (its image or tier is missing) is left
// out and reported in skipped; AddTier and AddImage start them later.
func New(ctx context.Context, fl *fleet.Fleet, e Interpreters, cfg Config, m *metrics.Metrics, log *slog.Logger) (_ *Pool, skipped []error) {
	return newPool(ctx, fl, e, cfg, m, log, time.Now)
}

func newPool(ctx context.Context, fl *fleet.Fleet, e Interpreters, cfg Config, m *metrics.Metrics, log *slog.Logger, now func() time.Time) (_ *Pool, skipped []error) {
	p := &Pool{fleet: fl, e: e, cfg: cfg, m: m, log: log, now: now}
	if p.cfg.MaxUses < 1 {
		p.cfg.MaxUses = 1
	}
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for i := range cfg.Warm {
		if err := p.start(ctx, i); err != nil {
			skipped = append(skipped, err)
		}
	}
	return p, skipped
}

// AddTier starts the classes of tier that New left out because the engine
// had no runtime for it then: the tier was installed while the server
// runs (engine.AddRuntime). It returns the classes still left out.
func (p *Pool) AddTier(ctx context.Context, tier runtime.Tier) (skipped []error) {
	return p.add(ctx, func(w Warm) bool { return w.Tier == tier })
}

// AddImage starts the classes of image that New left out because the
// image was not there then: it was built or imported while the server
// runs. It returns the classes still left out.
func (p *Pool) AddImage(ctx context.Context, image string) (skipped []error) {
	return p.add(ctx, func(w Warm) bool { return w.Image == image })
}

// Waiting returns the images of the classes left out so far, once each.
func (p *Pool) Waiting() []string {
	var names []string
	for i, w := range p.cfg.Warm {
		if !p.started(i) && w.Image != "" && !slices.Contains(names, w.Image) {
			names = append(names, w.Image)
		}
	}
	return names
}

// add starts the classes left out so far that match.
func (p *Pool) add(ctx context.Context, match func(Warm) bool) (skipped []error) {
	for i, w := range p.cfg.Warm {
		if !match(w) || p.started(i) {
			continue
		}
		if err := p.start(ctx, i); err != nil {
			skipped = append(skipped, err)
		}
	}
	return skipped
}

// started reports whether the class of Config.Warm[i] is in the pool.
func (p *Pool) started(i int) bool {
	return slices.ContainsFunc(p.all(), func(c *class) bool { return c.index == i })
}

// all returns the classes in the pool now.
func (p *Pool) all() []*class {
	p.cmu.RLock()
	defer p.cmu.RUnlock()
	return p.classes
}

// start resolves the class of Config.Warm[i] and starts filling it.
func (p *Pool) start(ctx context.Context, i int) error {
	w := p.cfg.Warm[i]
	if w.Language == "" {
		w.Language = "python"
	}
	if w.MaxIdle < w.MinIdle {
		w.MaxIdle = w.MinIdle
	}
	spec, img, err := p.e.WarmSpec(ctx, w.Tier, w.Language, w.Image, w.System)
	if err != nil {
		return fmt.Errorf("pool class %d (%s %s on %s): %w", i, w.Language, w.Image, w.Tier, err)
	}
	fixed := p.fleet.Fixed(w.Tier, spec.Limits)
	c := &class{index: i, warm: w, key: classKey(w.Tier, spec, fixed), fixed: fixed, spec: spec,
		img: img, target: w.MinIdle, kick: make(chan struct{}, 1),
		resetting: map[string]int{}, out: map[string]int{}, back: make(chan struct{})}
	p.cmu.Lock()
	defer p.cmu.Unlock()
	if p.closed || slices.ContainsFunc(p.classes, func(c *class) bool { return c.index == i }) {
		return nil
	}
	// A new slice: readers keep the one they have.
	p.classes = append(slices.Clip(p.classes), c)
	p.wg.Add(1)
	go p.fill(c)
	return nil
}

func classKey(tier runtime.Tier, spec runtime.Spec, fixed runtime.Limits) string {
	b, _ := json.Marshal(fixed)
	return runtime.Key(tier, spec) + string(b)
}

// Close stops refilling and destroys every idle sandbox. Sandboxes still
// lent are destroyed when they come back.
func (p *Pool) Close() {
	p.cmu.Lock()
	p.closed = true
	classes := p.classes
	p.cmu.Unlock()
	p.cancel()
	p.wg.Wait()
	for _, c := range classes {
		c.mu.Lock()
		idle := c.idle
		c.idle = nil
		c.mu.Unlock()
		for _, mb := range idle {
			p.destroy(c, mb)
		}
		p.gauge(c)
	}
}

// Acquire lends a warm sandbox that matches the claim exactly, or a fresh
// one.
func (p *Pool) Acquire(ctx context.Context, cl fleet.Claim) (*fleet.Lease, error) {
	start := time.Now()
	c := p.classOf(cl)
	if c == nil {
		return p.fleet.Fresh(ctx, cl)
	}
	var deadline *time.Timer // started by the first wait: a hit needs none
	var waited time.Duration // for the tenant's sandboxes to come back
	tight := false           // too tight a claim for any ready sandbox
	patient := true          // the claim may wait rather than take a fresh one
	for {
		mb, back := c.take(cl.Tenant, patient)
		if mb == nil {
			if back == nil || !patient {
				break // nothing to wait for, or waited ReturnWait already
			}
			// One of the tenant's sandboxes is being reset: that is
			// milliseconds away, a cold start is not.
			if deadline == nil {
				deadline = time.NewTimer(p.cfg.ReturnWait)
				defer deadline.Stop()
			}
			w := time.Now()
			select {
			case <-back:
				waited += time.Since(w)
				continue
			case <-deadline.C:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			waited += time.Since(w)
			// Waited long enough: a fresh one, if any, before a cold
			// start.
			patient = false
			continue
		}
		p.gauge(c)
		select {
		case <-mb.sb.Agent().Done():
			// Its agent died while it waited (the host's OOM killer, a
			// runtime that crashed): an execution in it could only fail,
			// and an Update that changes nothing would not notice.
			p.log.Debug("pooled sandbox is dead: replaced", "sandbox", mb.sb.ID())
			p.replaced(c, "error")
			c.lend(cl.Tenant, -1)
			p.destroy(c, mb)
			continue
		default:
		}
		if err := p.fit(ctx, mb, cl.Spec.Limits); err != nil {
			below := errors.Is(err, runtime.ErrLimitBelowUsage)
			if below && mb.owner == "" {
				// A fresh sandbox holds what every sandbox of the class
				// holds (its agent, its zygote): no ready one can serve
				// a claim this tight. It stays for others.
				p.log.Debug("claim too tight for a pooled sandbox", "sandbox", mb.sb.ID(), "err", err)
				c.putBack(mb, cl.Tenant)
				p.gauge(c)
				tight = true
				break
			}
			reason := "error"
			if below {
				// After a big program (gVisor's Sentry returns its memory
				// to the host in the background): a new sandbox is quicker
				// than waiting for it.
				reason = "limit_below_usage"
			}
			p.log.Debug("pooled sandbox does not fit the claim: replaced", "sandbox", mb.sb.ID(), "reason", reason, "err", err)
			p.replaced(c, reason)
			c.lend(cl.Tenant, -1)
			p.destroy(c, mb)
			continue
		}
		p.claimed(c, "hit", start)
		if deadline != nil {
			p.waited(c, waited)
		}
		p.log.Debug("pool hit", "sandbox", mb.sb.ID(), "tenant", cl.Tenant, "uses", mb.uses)
		tenant := cl.Tenant
		return fleet.NewLease(mb.sb, fleet.Pooled, mb.zygote, func(clean bool) { p.release(c, mb, tenant, clean) }), nil
	}
	// A claim too tight for any ready sandbox says nothing of demand:
	// more of them would not have served it.
	if !tight {
		c.missed(p.now())
	}
	p.claimed(c, "miss", start)
	if deadline != nil {
		p.waited(c, waited)
	}
	// Cold: a sandbox made for this claim, with its limits, which then
	// joins the pool for its tenant (without a zygote: the caller is
	// waiting).
	c.lend(cl.Tenant, 1) // from now: the refill keeps its room
	mb, err := p.create(ctx, c, cl.Spec, false)
	if err != nil {
		c.lend(cl.Tenant, -1)
		c.poke()
		return nil, err
	}
	tenant := cl.Tenant
	return fleet.NewLease(mb.sb, fleet.Pooled, nil, func(clean bool) { p.release(c, mb, tenant, clean) }), nil
}

// Take hands over, for good, a ready sandbox no execution has used that
// matches cl in all but its workspace (a live sandbox's first sandbox,
// whose disk then becomes its own: runtime.DiskKeeper), with cl's limits
// applied and its zygote, if any, still running. The pool forgets it and
// makes another; the taker destroys it. false: none is ready (or the
// claim is too tight for one), and the caller makes its own.
func (p *Pool) Take(ctx context.Context, cl fleet.Claim) (runtime.Sandbox, *fleet.Zygote, bool) {
	start := time.Now()
	spec := cl.Spec
	spec.Workspace = ""
	c := p.classOf(fleet.Claim{Tier: cl.Tier, Spec: spec, Tenant: cl.Tenant, Image: cl.Image})
	if c == nil {
		return nil, nil, false
	}
	for {
		// Only a fresh one: a sandbox that served a tenant holds that
		// tenant's past, and the taker may be another.
		mb, _ := c.take("", false)
		if mb == nil {
			return nil, nil, false
		}
		if mb.owner != "" {
			c.putBack(mb, "")
			return nil, nil, false
		}
		p.gauge(c)
		select {
		case <-mb.sb.Agent().Done():
			p.replaced(c, "error")
			c.lend("", -1)
			p.destroy(c, mb)
			continue
		default:
		}
		if err := p.fit(ctx, mb, cl.Spec.Limits); err != nil {
			if errors.Is(err, runtime.ErrLimitBelowUsage) {
				c.putBack(mb, "")
				p.gauge(c)
				return nil, nil, false
			}
			p.replaced(c, "error")
			c.lend("", -1)
			p.destroy(c, mb)
			continue
		}
		p.claimed(c, "hit", start)
		p.log.Debug("pool sandbox taken", "sandbox", mb.sb.ID())
		c.lend("", -1) // the taker's now
		return mb.sb, mb.zygote, true
	}
}

// classOf is the class whose sandboxes can serve cl, if any.
func (p *Pool) classOf(cl fleet.Claim) *class {
	classes := p.all()
	if len(classes) == 0 {
		return nil
	}
	key := classKey(cl.Tier, cl.Spec, p.fleet.Fixed(cl.Tier, cl.Spec.Limits))
	for _, c := range classes {
		if c.key == key && c.img.Digest == cl.Image.Digest && cl.Spec.Workspace == "" {
			return c
		}
	}
	return nil
}

// take removes and returns an idle sandbox for tenant: one it used before,
// else a fresh one; never one another tenant used. When there is none but
// one of the tenant's is being reset, take returns a channel closed when a
// sandbox comes back. A patient claim also gets that channel instead of a
// fresh sandbox when its tenant holds at least two sandboxes per execution
// in flight (this one included), one of them being reset: a reset is
// milliseconds of CPU, while taking a fresh one makes the refill create
// another (a quarter of a second of CPU), and a tenant with that many has
// enough to cover its resets. Below that, a tenant's claims take fresh ones
// until it has: its own executions in flight and one reset beside each.
func (c *class) take(tenant string, patient bool) (*member, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pick := -1
	for i := len(c.idle) - 1; i >= 0; i-- {
		if o := c.idle[i].owner; o == tenant {
			pick = i
			break
		} else if o == "" && pick < 0 {
			pick = i
		}
	}
	inReset := c.resetting[tenant]
	if pick >= 0 && c.idle[pick].owner == "" && patient && inReset > 0 && c.out[tenant]+inReset >= 2*(c.out[tenant]+1) {
		pick = -1
	}
	if pick < 0 {
		if inReset > 0 {
			return nil, c.back
		}
		return nil, nil
	}
	mb := c.idle[pick]
	c.idle = slices.Delete(c.idle, pick, pick+1)
	// Out until it is released, put back or dropped.
	c.lent++
	c.out[tenant]++
	if mb.owner == "" {
		c.poke()
	}
	return mb, nil
}

// returned records that one of tenant's sandboxes finished its reset and
// wakes the claims waiting for one. mb, unless nil (it is not coming back
// now), joins the idle ones in the same step, so that a claim it wakes
// finds it; returned reports whether there was room for it.
func (c *class) returned(tenant string, mb *member) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resetting[tenant]--; c.resetting[tenant] <= 0 {
		delete(c.resetting, tenant)
	}
	close(c.back)
	c.back = make(chan struct{})
	return mb != nil && c.addIdleLocked(mb)
}

// ready adds mb, which no claim waits for, to the idle ones if there is
// room, and reports whether there was.
func (c *class) ready(mb *member) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addIdleLocked(mb)
}

func (c *class) addIdleLocked(mb *member) bool {
	if len(c.idle) >= c.warm.MaxIdle {
		return false
	}
	c.idle = append(c.idle, mb)
	return true
}

// putBack returns a fresh sandbox a claim took but did not use to idle,
// where fresh ones go.
func (c *class) putBack(mb *member, tenant string) {
	c.mu.Lock()
	c.idle = append([]*member{mb}, c.idle...)
	c.lent--
	if c.out[tenant]--; c.out[tenant] <= 0 {
		delete(c.out, tenant)
	}
	c.mu.Unlock()
}

// lend counts d sandboxes more (or fewer) out with an execution of tenant.
func (c *class) lend(tenant string, d int) {
	c.mu.Lock()
	c.lent += d
	if c.out[tenant] += d; c.out[tenant] <= 0 {
		delete(c.out, tenant)
	}
	c.mu.Unlock()
}

// wantsFresh reports whether the refill should make another fresh sandbox
// (c.mu held): fewer than the target are ready or being made, and either
// fewer than MinIdle, or the class has room for one beside every sandbox
// that is ready, being made, out with an execution or being reset — the
// last two come back to idle for their tenants. Counting them keeps a
// refill from taking the room a tenant's sandbox comes back to: it was
// then destroyed for want of room, its tenant's next claim took a fresh
// one, and the refill made another (a create and a destroy per execution
// under steady load, each costing several times the execution's CPU).
func (c *class) wantsFresh() bool {
	fresh := c.creating
	for _, mb := range c.idle {
		if mb.owner == "" {
			fresh++
		}
	}
	if fresh >= c.target {
		return false
	}
	if fresh < c.warm.MinIdle {
		return true
	}
	back := c.lent
	for _, n := range c.resetting {
		back += n
	}
	return len(c.idle)+c.creating+back < c.warm.MaxIdle
}

// missed grows the class's target: demand is above what it keeps.
func (c *class) missed(now time.Time) {
	c.mu.Lock()
	c.lastMiss = now
	if c.target < c.warm.MaxIdle {
		c.target++
	}
	c.mu.Unlock()
	c.poke()
}

func (c *class) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// memoryUser is a sandbox that can say what it uses now.
type memoryUser interface{ MemoryUsage() (int64, error) }

// fit applies a claim's limits to a ready sandbox. A sandbox that holds
// more memory than the claim's limit leaves room for is refused with
// runtime.ErrLimitBelowUsage, by this check (the program needs Headroom
// beside what is there) or by Update; either way its limits are as before.
func (p *Pool) fit(ctx context.Context, mb *member, l runtime.Limits) error {
	if u, ok := mb.sb.(memoryUser); ok {
		used, err := u.MemoryUsage()
		if err != nil {
			return err
		}
		if used+p.cfg.Headroom > l.MemoryBytes {
			return fmt.Errorf("memory limit %d MiB leaves less than %d MiB beside the %d MiB the sandbox holds: %w",
				l.MemoryBytes>>20, p.cfg.Headroom>>20, used>>20, runtime.ErrLimitBelowUsage)
		}
	}
	return mb.sb.Update(ctx, l)
}

func (p *Pool) claimed(c *class, result string, start time.Time) {
	if p.m == nil {
		return
	}
	tier := string(c.warm.Tier)
	p.m.PoolClaims.WithLabelValues(tier, c.img.Name, result).Inc()
	p.m.PoolClaim.WithLabelValues(tier).Observe(time.Since(start).Seconds())
}

// waited records how long a claim waited for its tenant's sandboxes to
// come back from their reset.
func (p *Pool) waited(c *class, d time.Duration) {
	if p.m != nil {
		p.m.PoolWait.WithLabelValues(string(c.warm.Tier)).Observe(d.Seconds())
	}
}

// replaced counts a ready sandbox a claim could not use.
func (p *Pool) replaced(c *class, reason string) {
	if p.m != nil {
		p.m.PoolReplaced.WithLabelValues(string(c.warm.Tier), c.img.Name, reason).Inc()
	}
}

// gauge sets the idle gauge of c's tier and image: the sum over the
// classes that share them (one for executions, one for live sandboxes).
func (p *Pool) gauge(c *class) {
	if p.m == nil {
		return
	}
	n := 0
	for _, o := range p.all() {
		if o.warm.Tier == c.warm.Tier && o.img.Name == c.img.Name {
			o.mu.Lock()
			n += len(o.idle)
			o.mu.Unlock()
		}
	}
	p.m.PoolIdle.WithLabelValues(string(c.warm.Tier), c.img.Name).Set(float64(n))
}

// resetGauge counts c's sandboxes on their way back to idle.
func (p *Pool) resetGauge(c *class, d float64) {
	if p.m != nil {
		p.m.PoolReset.WithLabelValues(string(c.warm.Tier), c.img.Name).Add(d)
	}
}

// release takes a sandbox back after an execution. It returns at once: the
// reset happens in the background, off the caller's answer.
func (p *Pool) release(c *class, mb *member, tenant string, clean bool) {
	mb.uses++
	mb.owner = tenant
	p.log.Debug("pool release", "sandbox", mb.sb.ID(), "tenant", tenant, "clean", clean)
	if !clean || mb.uses >= p.cfg.MaxUses || p.ctx.Err() != nil {
		c.lend(tenant, -1)
		p.destroy(c, mb)
		c.poke() // room for a fresh one, if the class wants one
		return
	}
	p.fleet.Hold(mb.sb, fleet.HolderPool, time.Time{})
	c.mu.Lock()
	c.lent--
	if c.out[tenant]--; c.out[tenant] <= 0 {
		delete(c.out, tenant)
	}
	c.resetting[tenant]++
	cpu := c.placeLocked(mb, tenant)
	c.mu.Unlock()
	p.resetGauge(c, 1)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer p.resetGauge(c, -1)
		err := p.reset(mb, cpu)
		awaited := true // claims of tenant may be waiting for mb
		if err == nil && mb.zygote == nil && c.warm.Zygote {
			// A sandbox made cold for a claim starts its zygote now, so
			// that its tenant's later executions fork too. That is not a
			// quick reset: claims no longer wait for it.
			c.returned(tenant, nil)
			awaited = false
			err = p.startZygote(c, mb)
		}
		if err != nil {
			p.log.Debug("pooled sandbox not reused", "sandbox", mb.sb.ID(), "reason", err)
			if awaited {
				c.returned(tenant, nil)
			}
			p.destroy(c, mb)
			return
		}
		mb.idleAt = p.now()
		var added bool
		if awaited {
			added = c.returned(tenant, mb)
		} else {
			added = c.ready(mb)
		}
		if !added {
			p.log.Debug("pooled sandbox not kept: the class holds as many ready as it may", "sandbox", mb.sb.ID())
			p.destroy(c, mb)
			return
		}
		p.gauge(c)
	}()
}

// placeLocked is the CPU the zygote of mb, which tenant released, is to
// keep to after its reset, or -1 where it stays where it is (and where mb
// has no zygote that said its CPU). With c.mu held.
//
// A tenant that runs one execution after another alternates between two
// sandboxes: one runs the next execution while the other is reset (its
// zygote forks a spare, which copies its pages ahead). On two CPUs those
// run at the same time, and on the 2-CPU VMs Corral is measured on work
// costs more while both are busy: an execution used about a fifth more
// CPU than with both zygotes on one CPU (docs/pool.md, "Executions one
// after another on one CPU"). So a sandbox released while its tenant has
// no other execution in flight moves to the CPU of the tenant's sandbox
// that its next claim takes (its most recently reset one); released with
// another in flight, it goes back to the CPU it started on, and
// concurrent executions stay spread as the zygotes started.
func (c *class) placeLocked(mb *member, tenant string) int {
	if mb.zygote == nil || mb.cpu < 0 {
		return -1
	}
	want := mb.zygote.CPU
	if c.out[tenant] == 0 {
		for i := len(c.idle) - 1; i >= 0; i-- {
			if o := c.idle[i]; o.owner == tenant && o.zygote != nil && o.cpu >= 0 {
				want = o.cpu
				break
			}
		}
	}
	if want == mb.cpu {
		return -1
	}
	mb.cpu = want
	return want
}

// reset makes a used sandbox ready for its tenant's next execution, its
// zygote moved to cpu unless that is negative.
func (p *Pool) reset(mb *member, cpu int) error {
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if mb.zygote != nil {
		return fleet.Reset(ctx, mb.sb, cpu, mb.zygote.ID)
	}
	return fleet.Reset(ctx, mb.sb, -1)
}

// startZygote starts the class's zygote in a reset sandbox that has none,
// at the class's own limits (the last claim's may be tighter).
func (p *Pool) startZygote(c *class, mb *member) error {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Minute)
	defer cancel()
	if err := mb.sb.Update(ctx, c.spec.Limits); err != nil {
		return err
	}
	z, err := p.e.StartZygote(ctx, mb.sb, c.warm.Language, c.img, c.warm.Preload)
	if err != nil {
		return err
	}
	mb.zygote, mb.cpu = z, z.CPU
	return nil
}

// create makes a sandbox of class c from spec (c's own, or a claim's
// that matches c), with its zygote if asked.
func (p *Pool) create(ctx context.Context, c *class, spec runtime.Spec, zygote bool) (*member, error) {
	sb, err := p.fleet.Create(ctx, c.warm.Tier, spec, c.img, fleet.HolderPool)
	if err != nil {
		return nil, err
	}
	mb := &member{sb: sb, cpu: -1}
	if zygote {
		z, err := p.e.StartZygote(ctx, sb, c.warm.Language, c.img, c.warm.Preload)
		if err != nil {
			p.destroy(c, mb)
			return nil, err
		}
		mb.zygote, mb.cpu = z, z.CPU
	}
	return mb, nil
}

func (p *Pool) destroy(c *class, mb *member) { p.fleet.Destroy(mb.sb) }

// fill keeps c's fresh idle sandboxes at its target, shrinks the target
// back to MinIdle when claims stop missing, and destroys sandboxes idle for
// longer than IdleTimeout.
func (p *Pool) fill(c *class) {
	defer p.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	failures := 0
	for {
		p.expire(c)
		c.mu.Lock()
		// After 3 failures in a row, only the tick's slow retry.
		need := failures < 3 && c.wantsFresh()
		if need {
			c.creating++
		}
		c.mu.Unlock()
		if need {
			// Not cancelled by Close: a runtime interrupted mid-create can
			// leave parts of a sandbox behind. Close waits for it instead.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 2*time.Minute)
			mb, err := p.create(ctx, c, c.spec, c.warm.Zygote)
			cancel()
			if err == nil && p.ctx.Err() != nil {
				p.destroy(c, mb)
				err = p.ctx.Err()
			}
			c.mu.Lock()
			c.creating--
			if err == nil {
				mb.idleAt = p.now()
				c.idle = append([]*member{mb}, c.idle...) // fresh ones are taken after a tenant's own
			}
			c.mu.Unlock()
			if err != nil {
				if p.ctx.Err() != nil {
					return
				}
				failures++
				p.log.Warn("warm pool: create sandbox", "tier", c.warm.Tier, "image", c.img.Name, "err", err)
			} else {
				failures = 0
				p.gauge(c)
				continue
			}
		}
		select {
		case <-p.ctx.Done():
			return
		case <-c.kick:
		case <-tick.C:
			if failures > 0 {
				failures-- // retry slowly
			}
		}
	}
}

// expire destroys sandboxes idle for too long and lets the target follow
// demand down.
func (p *Pool) expire(c *class) {
	now := p.now()
	var doomed []*member
	c.mu.Lock()
	if c.target > c.warm.MinIdle && now.Sub(c.lastMiss) > p.cfg.IdleTimeout {
		c.target = c.warm.MinIdle
	}
	fresh := 0
	keep := c.idle[:0]
	for _, mb := range c.idle {
		old := now.Sub(mb.idleAt) > p.cfg.IdleTimeout
		switch {
		case mb.owner != "" && old:
			doomed = append(doomed, mb)
		case mb.owner == "" && fresh >= c.target && old:
			doomed = append(doomed, mb)
		default:
			if mb.owner == "" {
				fresh++
			}
			keep = append(keep, mb)
		}
	}
	c.idle = keep
	c.mu.Unlock()
	for _, mb := range doomed {
		p.destroy(c, mb)
	}
	if len(doomed) > 0 {
		p.gauge(c)
	}
}

// Idle returns how many sandboxes are ready, per class, in the order the
// classes started (configuration order, then those AddTier started).
func (p *Pool) Idle() []int {
	classes := p.all()
	n := make([]int, len(classes))
	for i, c := range classes {
		c.mu.Lock()
		n[i] = len(c.idle)
		c.mu.Unlock()
	}
	return n
}
