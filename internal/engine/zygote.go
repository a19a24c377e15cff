package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/runtime"
)

// StartZygote starts language's pre-started interpreter in sb, importing
// preload, and waits until it is ready. It runs with the environment every
// execution of the image starts from.
func (e *Engine) StartZygote(ctx context.Context, sb runtime.Sandbox, language string, img images.Image, preload []string) (*fleet.Zygote, error) {
	r, ok := lang.Get(language)
	if !ok {
		return nil, fmt.Errorf("zygote: unknown language %q", language)
	}
	zr, ok := r.(lang.Zygoter)
	if !ok {
		return nil, fmt.Errorf("zygote: %s has no pre-started interpreter", r.Name())
	}
	s := zr.ZygoteStep(preload)
	env := stepEnv(e.baseEnv(img), s.Env, nil)
	p, err := sb.Agent().Start(ctx, agent.StartRequest{Argv: s.Argv, Env: env, Dir: "/", Zygote: true},
		zygoteLog{e.log.With("sandbox", sb.ID(), "language", r.Name())})
	if err != nil {
		return nil, fmt.Errorf("start %s zygote: %w", r.Name(), err)
	}
	e.log.Debug("zygote ready", "sandbox", sb.ID(), "language", r.Name(), "ready", string(p.Ready))
	return &fleet.Zygote{ID: p.ID(), Language: r.Name(), Env: env, CPU: readyCPU(p.Ready)}, nil
}

// readyCPU is the CPU a zygote's ready message says it keeps to, or -1.
func readyCPU(ready []byte) int {
	var r struct {
		CPU *int `json:"cpu"`
	}
	if json.Unmarshal(ready, &r) != nil || r.CPU == nil || *r.CPU < 0 {
		return -1
	}
	return *r.CPU
}

// zygoteLog logs what a zygote prints (nothing, unless it breaks).
type zygoteLog struct{ log *slog.Logger }

func (z zygoteLog) Stdout(p []byte) { z.log.Debug("zygote stdout", "text", string(p)) }
func (z zygoteLog) Stderr(p []byte) { z.log.Debug("zygote stderr", "text", string(p)) }
func (z zygoteLog) Status([]byte)   {}
