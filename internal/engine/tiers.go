package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/runtime"
)

// ErrTierPending matches a *TierPendingError: the tier an execution needs
// is still being installed on this machine, so the same request may
// succeed later.
var ErrTierPending = errors.New("tier still being installed")

// TierPendingError is Prepare's answer for an execution routed to a tier
// whose runtime is being installed (fleet.SetPending). The execution is not run
// on another tier instead: the routing decision stands, only its time has
// not come.
type TierPendingError struct {
	Tier runtime.Tier
	// Reason is the routing decision's ("requested", "auto: untrusted").
	Reason string
}

func (e *TierPendingError) Error() string {
	return fmt.Sprintf("the %s tier (%s) is still being installed on this machine; retry in a few minutes", e.Tier, e.Reason)
}

// Is makes errors.Is(err, ErrTierPending) true.
func (e *TierPendingError) Is(target error) bool { return target == ErrTierPending }

// tierRetryAfter is how long a client waits before it asks again for a
// tier being installed: building runsc takes minutes, and a client that
// retries at once only adds load.
const tierRetryAfter = 30 * time.Second

// Fault is e for a caller: unavailable (tier_unavailable) for now. Where
// the build's log is, is for the operator: the server logged it when the
// build was seen.
func (e *TierPendingError) Fault() *fault.Error {
	return &fault.Error{Kind: fault.Unavailable, Code: "tier_unavailable", RetryAfter: tierRetryAfter, Err: e,
		Message: fmt.Sprintf("this execution runs on the %s tier (%s), which is still being installed on this server; retry after the delay in Retry-After",
			e.Tier, e.Reason)}
}
