//go:build linux

package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/corralhq/corral/internal/lang"
)

// TestLocalZygote starts the python zygote in local mode and runs programs
// through it: the zygote's children are orphans by design, so this is the
// subreaper at work (the agent reaps them and reports how they ended), and
// a reset's ping reaches the zygote.
func TestLocalZygote(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3: %v", err) // on every machine that runs the suite
	}
	l, root := startLocal(t)
	ctx := t.Context()
	r, ok := lang.Get("python")
	if !ok {
		t.Fatal("no python runner")
	}
	zr := r.(lang.Zygoter)
	step := zr.ZygoteStep(nil)
	env := append([]string{"PATH=" + filepath.Dir(python) + ":/usr/bin:/bin"}, step.Env...)
	z, err := l.Start(ctx, StartRequest{Argv: step.Argv, Env: env, Dir: "/", Zygote: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(z.Ready) == 0 {
		t.Error("the zygote reported nothing when ready")
	}
	for i, c := range []struct {
		code string
		out  string
		exit int
	}{
		{"print('hello from a fork')", "hello from a fork\n", 0},
		{"import sys; print('again'); sys.exit(3)", "again\n", 3},
	} {
		// The code's sandbox path in argv (/tmp/.corral/...) is taken
		// under the root, where the file is.
		plan := r.Plan(c.code)
		file := filepath.Join(root, plan.Files[0].Path)
		os.MkdirAll(filepath.Dir(file), 0o755)
		if err := os.WriteFile(file, plan.Files[0].Content, 0o644); err != nil {
			t.Fatal(err)
		}
		out, st := run(t, l, StartRequest{Argv: plan.Run.Argv, Env: env, Dir: "/workspace", StatusFD: true, Via: z.ID()})
		if out.stdout.String() != c.out || st.Code != c.exit {
			t.Errorf("run %d: stdout %q, status %+v, stderr %q; want %q, exit %d", i, out.stdout.String(), st, out.stderr.String(), c.out, c.exit)
		}
		if err := l.Reset(ctx, ResetRequest{Clear: []string{"/workspace"}, Zygotes: []uint32{z.ID()}}); err != nil {
			t.Fatalf("reset %d: %v", i, err)
		}
	}
	// A zygote that is gone fails the reset, by kind.
	if err := z.Signal(ctx, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := z.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, ResetRequest{Zygotes: []uint32{z.ID()}}); !errors.Is(err, KindZygote) {
		t.Errorf("reset with a dead zygote: %v, want %s", err, KindZygote)
	}
}
