package testenv

import (
	"context"
	"errors"
	"slices"
	"sync"
)

// Owners is a cluster as a node's workspaces and live sandboxes see it
// (workspace.Owner, live.Publisher): it gives this node the ids no other
// node owns, keeps the latest description published of each, and records
// what it was asked. Ids are "tenant/id". It is safe for concurrent use;
// set Others and Errs before use.
type Owners struct {
	// Others are owned by another node; Errs fail (the store is down for
	// them).
	Others map[string]bool
	Errs   map[string]error

	mu        sync.Mutex
	mine      map[string]bool
	published map[string][]byte
	owns      []string
	disowns   []string
}

// NewOwners returns a cluster where every id is free.
func NewOwners() *Owners {
	return &Owners{Others: map[string]bool{}, Errs: map[string]error{}, mine: map[string]bool{}, published: map[string][]byte{}}
}

// Own implements workspace.Owner.
func (o *Owners) Own(_ context.Context, tenant, id string) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := tenant + "/" + id
	o.owns = append(o.owns, k)
	if err := o.Errs[k]; err != nil {
		return false, err
	}
	if o.Others[k] {
		return false, nil
	}
	o.mine[k] = true
	return true, nil
}

// Disown implements workspace.Owner.
func (o *Owners) Disown(_ context.Context, tenant, id string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := tenant + "/" + id
	o.disowns = append(o.disowns, k)
	delete(o.mine, k)
	delete(o.published, k)
	return nil
}

// PublishSandbox implements live.Publisher.
func (o *Owners) PublishSandbox(_ context.Context, tenant, id string, info []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	k := tenant + "/" + id
	if !o.mine[k] {
		return errors.New("not this node's sandbox")
	}
	o.published[k] = slices.Clone(info)
	return nil
}

// Published is the latest description published of tenant/id.
func (o *Owners) Published(k string) []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.published[k]
}

// Asked returns the ids Own and Disown were asked for, in order.
func (o *Owners) Asked() (owns, disowns []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.owns), slices.Clone(o.disowns)
}
