// Package cluster is what the nodes of one deployment know of each other,
// kept in the shared store: each node's heartbeat and the address its API
// is reached at, which nodes are lost, which node owns each id of a
// workspace session or a live sandbox (one id space: internal/workspace)
// with the description a live sandbox's owner published, and the
// forwarding of their calls to the owner. A deployment of one node is a
// cluster of one.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/store"
)

// Config configures a node's membership.
type Config struct {
	// ID names this node; stable across its restarts.
	ID string
	// Address is where other nodes reach this node's API ("host:port").
	Address string
	// Heartbeat is how often the node announces itself.
	Heartbeat time.Duration
	// LostAfter is how long a node may stay silent before it is lost: what
	// it ran fails as retryable, its sessions and sandboxes are lost. Several heartbeats.
	LostAfter time.Duration
	// PeerTLS, if set, is how this node verifies the others, which serve
	// https (every node of a cluster does, or none): calls are forwarded
	// over https. Nil: over http.
	PeerTLS *tls.Config
}

// OwnerError says why the calls for a session or a live sandbox cannot
// reach the node that owns it.
type OwnerError struct {
	// Tenant and ID name the session or sandbox.
	Tenant, ID string
	// Node is the owner's id.
	Node string
	// Lost: the owner is gone, and the session or sandbox with it. Otherwise the
	// owner is not answering now and may come back (retry later).
	Lost bool
	// HandedOff: its node handed the sandbox off (a drain), kept in the
	// snapshot store for any node to take over (Node is store.NoNode).
	HandedOff bool
}

func (e *OwnerError) Error() string {
	if e.HandedOff {
		return fmt.Sprintf("%s was handed off by its node, for another to take over", e.ID)
	}
	if e.Lost {
		return fmt.Sprintf("%s was lost with node %s", e.ID, e.Node)
	}
	return fmt.Sprintf("%s is owned by node %s, which is not answering", e.ID, e.Node)
}

// Fault is e for a call about a session: gone with its node (410
// session_lost), or unavailable for now (503 session_unavailable); the
// field is session_id.
func (e *OwnerError) Fault() *fault.Error { return e.FaultAs("session") }

// FaultAs is e for a call about what ("session", or "sandbox" for a live
// sandbox): codes what_lost and what_unavailable, field what_id.
func (e *OwnerError) FaultAs(what string) *fault.Error {
	if e.HandedOff {
		return &fault.Error{Kind: fault.Unavailable, Code: what + "_unavailable", Field: what + "_id", Err: e,
			RetryAfter: ownerRetryAfter,
			Message:    what + " " + e.ID + " is moving between nodes; retry after the delay in Retry-After"}
	}
	if e.Lost {
		return &fault.Error{Kind: fault.Gone, Code: what + "_lost", Field: what + "_id", Err: e,
			Message: what + " " + e.ID + " was lost with the node that owned it; its files are gone: create a new " + what}
	}
	return &fault.Error{Kind: fault.Unavailable, Code: what + "_unavailable", Field: what + "_id", Err: e,
		RetryAfter: ownerRetryAfter,
		Message:    what + " " + e.ID + " is owned by a node that is not answering; retry after the delay in Retry-After"}
}

// ownerRetryAfter is how long a caller waits before asking again for an
// id whose owner does not answer: about a heartbeat.
const ownerRetryAfter = 2 * time.Second

// ErrNoOwner: no node owns the id.
var ErrNoOwner = errors.New("no owner")

// Cluster is one node's view of its cluster. It is safe for concurrent use.
type Cluster struct {
	cfg   Config
	store store.Store
	log   *slog.Logger
	// forward carries forwarded calls to their owner.
	forward *http.Transport
	start   time.Time
	now     func() time.Time

	mu sync.Mutex
	// steadySince is when the current run of successful heartbeats began
	// (zero after a failed one; restarted after a late one).
	steadySince time.Time
	// beatAt is when the last successful heartbeat began.
	beatAt time.Time
	// nodes caches the store's node list for a moment.
	nodes     []store.Node
	nodesRead time.Time
	// owned caches, for a heartbeat, the ids this node found it owns:
	// each of its sandbox's calls (a browser's assets through a port)
	// needs no store read. Only this node gives its ids up (Disown, which
	// drops them); another may take one only from a node lost for
	// LostAfter, long after the entry expired.
	owned map[ownedKey]time.Time
}

type ownedKey struct{ tenant, id string }

// nodesFresh is how long a read of the node list serves lookups, at most
// (see listFresh).
const nodesFresh = 500 * time.Millisecond

// listFresh is how long a read of the node list serves lookups: half a
// second, or half a heartbeat if that is shorter. OwnerOf judges a
// node's silence from the list, so a list kept longer than two missed
// beats would make a node that beats on time look silent.
func (c *Cluster) listFresh() time.Duration { return min(nodesFresh, c.cfg.Heartbeat/2) }

// New returns the cluster as node cfg.ID sees it; Run announces the node.
func New(cfg Config, st store.Store, log *slog.Logger) *Cluster {
	return &Cluster{cfg: cfg, store: st, log: log, forward: forwardTransport(cfg.PeerTLS), start: time.Now().UTC(), now: time.Now}
}

// Self is this node's id.
func (c *Cluster) Self() string { return c.cfg.ID }

// Config returns the configuration.
func (c *Cluster) Config() Config { return c.cfg }

// Beat announces this node once.
func (c *Cluster) Beat(ctx context.Context) error {
	now := c.now().UTC()
	err := c.store.Beat(ctx, store.Node{ID: c.cfg.ID, Address: c.cfg.Address, StartedAt: c.start, SeenAt: now})
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.steadySince = time.Time{}
	case c.steadySince.IsZero() || now.Sub(c.beatAt) > c.cfg.LostAfter/2:
		// The first of a run, or one after a gap: this node was silent
		// itself (its host stalled, or its process), so the others'
		// silence over the same time may be the same stall's.
		c.steadySince = now
	}
	if err == nil {
		c.beatAt = now
	}
	if err != nil {
		return fmt.Errorf("announce node %s: %w", c.cfg.ID, err)
	}
	return nil
}

// Run announces this node every Heartbeat until ctx ends.
func (c *Cluster) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	failing := false
	for {
		err := c.Beat(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			c.log.Warn("node heartbeat failed; retrying", "err", err)
			failing = true
		case err == nil && failing:
			c.log.Info("node heartbeat works again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// steady reports whether this node has reached the store for at least
// LostAfter without a failure, and without a gap of half that between two
// of its beats: only then is another node's silence its own and not the
// store's, or a stall of the host they share (every process on it stops
// together, and each would otherwise find the others silent when it
// resumes).
func (c *Cluster) steady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.steadySince.IsZero() && c.now().Sub(c.steadySince) >= c.cfg.LostAfter
}

// Nodes lists the nodes, read from the store at most every half second
// (every half heartbeat, if that is shorter).
func (c *Cluster) Nodes(ctx context.Context) ([]store.Node, error) {
	c.mu.Lock()
	if !c.nodesRead.IsZero() && c.now().Sub(c.nodesRead) < c.listFresh() {
		ns := c.nodes
		c.mu.Unlock()
		return ns, nil
	}
	c.mu.Unlock()
	ns, err := c.store.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nodes, c.nodesRead = ns, c.now()
	c.mu.Unlock()
	return ns, nil
}

// Lost returns the other nodes silent for longer than LostAfter. It
// returns none until this node itself has been steady that long, so that
// a store that was down does not make every node look lost.
func (c *Cluster) Lost(ctx context.Context) ([]store.Node, error) {
	if !c.steady() {
		return nil, nil
	}
	ns, err := c.store.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var lost []store.Node
	for _, n := range ns {
		if n.ID != c.cfg.ID && c.silent(n) > c.cfg.LostAfter {
			lost = append(lost, n)
		}
	}
	return lost, nil
}

func (c *Cluster) silent(n store.Node) time.Duration { return c.now().Sub(n.SeenAt) }

// Owner is the node that owns a session or a live sandbox.
type Owner struct {
	Node  store.Node
	Local bool // this node
}

// OwnerOf returns the node that owns the session or sandbox (tenant, id);
// with claim, an id no node owns becomes this node's. Errors:
// ErrNoOwner (without claim), *OwnerError when the owner is lost or
// not answering, or the store's.
func (c *Cluster) OwnerOf(ctx context.Context, tenant, id string, claim bool) (Owner, error) {
	local := Owner{Node: store.Node{ID: c.cfg.ID, Address: c.cfg.Address}, Local: true}
	if c.ownedNow(tenant, id) {
		return local, nil
	}
	var owner string
	var err error
	if claim {
		owner, err = c.store.ClaimSession(ctx, tenant, id, c.cfg.ID, c.now())
	} else {
		owner, err = c.store.SessionOwner(ctx, tenant, id)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Owner{}, ErrNoOwner
	case err != nil:
		return Owner{}, fmt.Errorf("owner of %s: %w", id, err)
	case owner == c.cfg.ID:
		c.setOwned(tenant, id, true)
		return local, nil
	case owner == store.NoNode:
		return Owner{}, &OwnerError{Tenant: tenant, ID: id, Node: owner, HandedOff: true}
	}
	ns, err := c.Nodes(ctx)
	if err != nil {
		return Owner{}, fmt.Errorf("owner of %s: %w", id, err)
	}
	for _, n := range ns {
		if n.ID != owner {
			continue
		}
		switch silent := c.silent(n); {
		case silent > c.cfg.LostAfter:
			return Owner{}, &OwnerError{Tenant: tenant, ID: id, Node: owner, Lost: true}
		case silent > c.cfg.Heartbeat*5/2:
			// Two heartbeats missed: not lost yet, but not worth a wait.
			return Owner{}, &OwnerError{Tenant: tenant, ID: id, Node: owner}
		}
		return Owner{Node: n}, nil
	}
	// Forgotten: lost long ago.
	return Owner{}, &OwnerError{Tenant: tenant, ID: id, Node: owner, Lost: true}
}

// Own reports whether this node owns the session or sandbox (tenant,
// id), claiming it if no node does (workspace.Owner).
func (c *Cluster) Own(ctx context.Context, tenant, id string) (bool, error) {
	owner, err := c.store.ClaimSession(ctx, tenant, id, c.cfg.ID, c.now())
	if err != nil {
		return false, fmt.Errorf("own %s: %w", id, err)
	}
	return owner == c.cfg.ID, nil
}

// Disown gives up this node's ownership of a session or sandbox it
// removed (workspace.Owner).
func (c *Cluster) Disown(ctx context.Context, tenant, id string) error {
	c.setOwned(tenant, id, false)
	return c.store.ReleaseSession(ctx, tenant, id, c.cfg.ID)
}

// ownedNow reports whether (tenant, id) is in the owned cache, unexpired.
func (c *Cluster) ownedNow(tenant, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	until, ok := c.owned[ownedKey{tenant, id}]
	return ok && c.now().Before(until)
}

// setOwned records that this node owns (tenant, id) for a heartbeat, or
// forgets it.
func (c *Cluster) setOwned(tenant, id string, owned bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := ownedKey{tenant, id}
	if !owned {
		delete(c.owned, k)
		return
	}
	now := c.now()
	if c.owned == nil {
		c.owned = map[ownedKey]time.Time{}
	}
	if len(c.owned) >= maxOwnedCache {
		for k, until := range c.owned {
			if !now.Before(until) {
				delete(c.owned, k)
			}
		}
	}
	if len(c.owned) < maxOwnedCache {
		c.owned[k] = now.Add(c.cfg.Heartbeat)
	}
}

// maxOwnedCache bounds the owned cache.
const maxOwnedCache = 4096

// HandOff gives a sandbox this node owns to no node, its published
// description kept, so that any node may take it over (live.Mover).
func (c *Cluster) HandOff(ctx context.Context, tenant, id string) error {
	c.setOwned(tenant, id, false)
	owner, err := c.store.MoveSession(ctx, tenant, id, c.cfg.ID, store.NoNode)
	if err != nil {
		return fmt.Errorf("hand off %s: %w", id, err)
	}
	if owner != store.NoNode {
		return fmt.Errorf("hand off %s: owned by node %s", id, owner)
	}
	return nil
}

// TakeOver makes a sandbox owned by node from (store.NoNode: handed off;
// else a lost node) this node's, its published description kept; it
// reports whether it is this node's (false: another node took it first)
// (live.Mover).
func (c *Cluster) TakeOver(ctx context.Context, tenant, id, from string) (bool, error) {
	owner, err := c.store.MoveSession(ctx, tenant, id, from, c.cfg.ID)
	if err != nil {
		return false, fmt.Errorf("take over %s: %w", id, err)
	}
	if owner != c.cfg.ID {
		return false, nil
	}
	c.setOwned(tenant, id, true)
	return true, nil
}

// Published returns the description published of a sandbox, and its
// owner; ErrNoOwner when there is none.
func (c *Cluster) Published(ctx context.Context, tenant, id string) (Sandbox, error) {
	list, err := c.Sandboxes(ctx, tenant)
	if err != nil {
		return Sandbox{}, err
	}
	for _, sb := range list {
		if sb.ID == id {
			return sb, nil
		}
	}
	return Sandbox{}, ErrNoOwner
}

// Peer returns another node that beats (within two heartbeats): prefer if
// it is one, else any.
func (c *Cluster) Peer(ctx context.Context, prefer string) (Owner, error) {
	ns, err := c.Nodes(ctx)
	if err != nil {
		return Owner{}, err
	}
	var out []store.Node
	for _, n := range ns {
		if n.ID == c.cfg.ID || c.silent(n) > c.cfg.Heartbeat*2 {
			continue
		}
		if n.ID == prefer {
			return Owner{Node: n}, nil
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return Owner{}, ErrNoOwner
	}
	return Owner{Node: out[rand.IntN(len(out))]}, nil
}

// Forget removes a lost node's ownership of a session or sandbox, so that
// its id can be used again (a client deleted it).
func (c *Cluster) Forget(ctx context.Context, e *OwnerError) error {
	return c.store.ReleaseSession(ctx, e.Tenant, e.ID, e.Node)
}

// Sandbox is a live sandbox as the cluster lists it: its owner and the
// description the owner published.
type Sandbox struct {
	ID, Node string
	Info     []byte
}

// PublishSandbox records the description of a live sandbox this node
// owns, for every node to list (live.Publisher).
func (c *Cluster) PublishSandbox(ctx context.Context, tenant, id string, info []byte) error {
	return c.store.SetSessionInfo(ctx, tenant, id, c.cfg.ID, info)
}

// Sandboxes lists a tenant's published sandboxes on every node, by id.
func (c *Cluster) Sandboxes(ctx context.Context, tenant string) ([]Sandbox, error) {
	ss, err := c.store.ListSessions(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]Sandbox, len(ss))
	for i, s := range ss {
		out[i] = Sandbox{ID: s.ID, Node: s.Node, Info: s.Info}
	}
	return out, nil
}
