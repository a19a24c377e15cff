package fleet_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/corralhq/corral/internal/fleet"
	"github.com/corralhq/corral/internal/images"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/runtime/runtimetest"
)

// TestPauseRefused: a sandbox that cannot be paused, or whose pause
// fails, stays registered with its image held, and runs on.
func TestPauseRefused(t *testing.T) {
	u := newUnit(t, fleet.Config{})
	u.rts[runtime.TierGVisor].EnablePause()
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tier runtime.Tier
		spec runtime.Spec
		dir  string
		want error
	}{
		// runc's sandboxes are no runtime.Pauser.
		{"container", runtime.TierContainer, runtime.Spec{}, t.TempDir(), runtime.ErrNotPausable},
		// A pausable runtime's sandbox without a workspace of its own.
		{"no workspace", runtime.TierGVisor, runtime.Spec{}, t.TempDir(), runtime.ErrNotPausable},
		{"directory in use", runtime.TierGVisor, runtime.Spec{Workspace: filepath.Join(t.TempDir(), "ws")}, full, fs.ErrExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, err := u.f.Create(t.Context(), tc.tier, tc.spec, image(tc.name), fleet.HolderSession)
			if err != nil {
				t.Fatal(err)
			}
			defer u.f.Destroy(sb)
			if err := u.f.Pause(t.Context(), sb, tc.dir); !errors.Is(err, tc.want) {
				t.Fatalf("Pause = %v, want %v", err, tc.want)
			}
			u.wantHolder(sb, fleet.HolderSession, true)
			if n := u.holds.now()["sha256:"+tc.name]; n != 1 {
				t.Errorf("image locks after a refused pause: %d, want 1", n)
			}
			answers(t, sb)
		})
	}
}

// TestPauseRestore: a paused sandbox is forgotten and its image let go;
// restoring it registers it again, holding its image, with its workspace
// as it was (a program wrote it, in its working directory). A restore
// that fails holds nothing.
func TestPauseRestore(t *testing.T) {
	u := newUnit(t, fleet.Config{})
	g := runtime.TierGVisor
	u.rts[g].EnablePause()
	spec := runtime.Spec{Workspace: filepath.Join(t.TempDir(), "ws")}
	sb, err := u.f.Create(t.Context(), g, spec, image("a"), fleet.HolderSession)
	if err != nil {
		t.Fatal(err)
	}
	if st, out := runtimetest.Exec(t, sb, "sh", "-c", "echo kept > f"); st.Code != 0 {
		t.Fatalf("write: %+v %s", st, out.ErrString())
	}
	dir := filepath.Join(t.TempDir(), "paused")
	if err := u.f.Pause(t.Context(), sb, dir); err != nil {
		t.Fatal(err)
	}
	u.wantHolder(sb, "", false)
	u.wantCount(map[string]int{})
	u.wantHolds(map[string]int{})
	if ids := live(u.rts[g]); len(ids) != 0 {
		t.Errorf("sandboxes live after a pause: %v", ids)
	}

	// Refusals first: none of them may use up the saved state.
	if _, err := u.f.Restore(t.Context(), runtime.Tier("none"), spec, image("a"), dir, fleet.HolderSession); err == nil {
		t.Error("Restore on a tier without a runtime succeeded")
	}
	if _, err := u.f.Restore(t.Context(), runtime.TierContainer, spec, image("a"), dir, fleet.HolderSession); !errors.Is(err, runtime.ErrNoImage) {
		t.Errorf("Restore on another tier = %v, want runtime.ErrNoImage", err)
	}
	if _, err := u.f.Restore(t.Context(), g, spec, image("a"), t.TempDir(), fleet.HolderSession); !errors.Is(err, runtime.ErrNoImage) {
		t.Errorf("Restore from a directory without a pause = %v, want runtime.ErrNoImage", err)
	}
	u.holds.setRefuse(images.ErrNotFound)
	if _, err := u.f.Restore(t.Context(), g, spec, image("a"), dir, fleet.HolderSession); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("Restore of an image that cannot be held = %v, want images.ErrNotFound", err)
	}
	u.holds.setRefuse(nil)
	u.wantHolds(map[string]int{})
	u.wantCount(map[string]int{})

	back, err := u.f.Restore(t.Context(), g, spec, image("a"), dir, fleet.HolderSession)
	if err != nil {
		t.Fatal(err)
	}
	u.wantHolder(back, fleet.HolderSession, true)
	u.wantHolds(map[string]int{"sha256:a": 1})
	if st, out := runtimetest.Exec(t, back, "cat", "f"); st.Code != 0 || out.String() != "kept\n" {
		t.Errorf("the restored workspace: %+v %q %q", st, out.String(), out.ErrString())
	}
	u.f.Destroy(back)
	u.wantHolds(map[string]int{})
	if ids := live(u.rts[g]); len(ids) != 0 {
		t.Errorf("sandboxes left: %v", ids)
	}
}
