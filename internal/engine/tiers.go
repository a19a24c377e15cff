package engine

import (
	"errors"
	"fmt"

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
