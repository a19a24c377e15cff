package node

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/store"
	"github.com/corralhq/corral/sandbox"
)

// memoryEntry is the body of a memory delivery: what a memory service needs
// to remember an execution. Corral keeps memory out of the
// sandbox: Corral only informs, the memory service decides what to keep and
// for how long. Artifacts are named, not linked: links expire, and the
// memory service is not the tenant. docs/api.md documents the shape.
type memoryEntry struct {
	Tenant      string            `json:"tenant"`
	ExecutionID string            `json:"execution_id"`
	SessionID   string            `json:"session_id,omitempty"`
	Language    string            `json:"language"`
	Status      sandbox.Status    `json:"status"`
	ErrorType   sandbox.ErrorType `json:"error_type,omitempty"`
	ExitCode    *int              `json:"exit_code,omitempty"`
	Summary     string            `json:"summary"`
	Artifacts   []string          `json:"artifacts"`
	CreatedAt   time.Time         `json:"created_at,omitzero"`
	FinishedAt  time.Time         `json:"finished_at,omitzero"`
}

// memoryDelivery is the delivery of rec's summary to the memory service.
func (n *Node) memoryDelivery(tenant string, rec sandbox.Result, now time.Time) (store.Delivery, error) {
	e := memoryEntry{Tenant: tenant, ExecutionID: rec.ExecutionID, SessionID: rec.SessionID, Language: rec.Language,
		Status: rec.Status, ExitCode: rec.ExitCode, Summary: rec.Summary, Artifacts: make([]string, len(rec.Artifacts)),
		CreatedAt: storedTime(rec.CreatedAt), FinishedAt: storedTime(rec.FinishedAt)}
	if rec.Error != nil {
		e.ErrorType = rec.Error.Type
	}
	for i, a := range rec.Artifacts {
		e.Artifacts[i] = a.Path
	}
	body, err := json.Marshal(e)
	if err != nil {
		return store.Delivery{}, fmt.Errorf("encode memory entry: %w", err)
	}
	return store.Delivery{
		ID: newDeliveryID(), Tenant: tenant, ExecutionID: rec.ExecutionID, Kind: store.KindMemory,
		URL: n.cfg.MemoryURL, Body: body, State: store.DeliveryPending,
		NextAttempt: now, CreatedAt: now, UpdatedAt: now,
	}, nil
}

// storedTime is t as the store keeps it (microseconds, UTC), so that a
// memory entry's times equal those of the record GET returns.
func storedTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Truncate(time.Microsecond).UTC()
}
