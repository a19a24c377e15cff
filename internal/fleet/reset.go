package fleet

import (
	"context"
	"errors"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/runtime"
)

// ErrTainted reports a sandbox whose kernel counters say an execution hit
// a limit (an OOM kill, a refused fork, a full disk): its next execution
// would inherit the count, so it is not reused.
var ErrTainted = errors.New("an execution hit a limit")

// Reset makes a used sandbox ready for its tenant's next execution: every
// process but the zygotes killed, /workspace, /tmp, /dev/shm and IPC
// emptied, inherited limits checked, the zygotes pinged (by its agent),
// and the kernel's counters cleared once they show no limit hit. The
// zygotes keep to cpu from then on, unless it is negative
// (agent.ResetRequest.CPU). A sandbox that fails it must be destroyed.
func Reset(ctx context.Context, sb runtime.Sandbox, cpu int, zygotes ...uint32) error {
	st, err := sb.Stats(ctx)
	if err != nil {
		return err
	}
	if st.OOMKills > 0 || st.PidsLimitHits > 0 || st.DiskFull {
		return ErrTainted
	}
	req := agent.ResetRequest{Clear: []string{"/workspace", "/tmp"}, IPC: true, Zygotes: zygotes}
	if cpu >= 0 && len(zygotes) > 0 {
		req.CPU = &cpu
	}
	if err := sb.Agent().Reset(ctx, req); err != nil {
		return err
	}
	return sb.ResetStats(ctx)
}
