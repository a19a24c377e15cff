package live

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/corralhq/corral/internal/kernel"
	"github.com/corralhq/corral/sandbox"
)

// TestHostStateFile: the description beside a paused sandbox's memory
// reads back as written, leaves no temporary file, and is refused in a
// version this server does not know; a pause directory without one says
// so (hostStateMissing).
func TestHostStateFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := readHostState(dir); !hostStateMissing(err) {
		t.Fatalf("no description: %v, want it missing", err)
	}
	at := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	st := hostState{Version: hostStateVersion,
		Processes: []savedProcess{
			{Info: sandbox.ProcessInfo{PID: 7, Cmd: []string{"true"}, Cwd: "/workspace", StartedAt: at,
				Exit: &sandbox.ProcessExit{ExitCode: 0, EndedAt: at.Add(time.Second), Duration: 1000}},
				Exit: &savedExit{Code: 0, At: at.Add(time.Second), DurationMS: 1000}},
			{Info: sandbox.ProcessInfo{PID: 9, Tag: "srv", Cmd: []string{"sleep", "9"}, Cwd: "/tmp", Stdin: true,
				PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}, Running: true, StartedAt: at}, Agent: 12, StdinClosed: true},
		},
		Contexts: kernel.Saved{Roots: map[string]uint32{"python": 3}, Cells: 17,
			Contexts: []kernel.SavedContext{{ID: "c1", Language: "python", Cwd: "/workspace", Env: []string{"A=1"}, Process: 5}}},
	}
	if err := writeHostState(dir, st); err != nil {
		t.Fatal(err)
	}
	got, err := readHostState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(st, got); diff != "" {
		t.Errorf("read back (-wrote +read):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != hostStateFile {
		t.Errorf("the pause directory holds %v, want only %s", entries, hostStateFile)
	}
	if err := os.WriteFile(filepath.Join(dir, hostStateFile), []byte(`{"version":2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readHostState(dir); !errors.Is(err, errors.ErrUnsupported) || hostStateMissing(err) {
		t.Errorf("a description of version 2: %v, want it refused", err)
	}
}
