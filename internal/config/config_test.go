package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/collect"
)

// TestSummaryAndMemory: the [summary] and [memory] sections load from TOML
// and Validate refuses what cannot work.
func TestSummaryAndMemory(t *testing.T) {
	for _, c := range []struct {
		name, toml string
		want       string // substring of the error; "" for none
	}{
		{"defaults", ``, ""},
		{"cap", "[summary]\nmax_chars = 1500\n", ""},
		{"cap too small", "[summary]\nmax_chars = 999\n", "summary.max_chars 999"},
		{"memory", "[memory]\nurl = \"https://memory.example/hook\"\nsecret = \"s\"\n", ""},
		{"memory without secret", "[memory]\nurl = \"https://memory.example/hook\"\n", "memory.secret is empty"},
		{"memory not http", "[memory]\nurl = \"ftp://memory.example/\"\nsecret = \"s\"\n", "memory.url"},
		{"memory no host", "[memory]\nurl = \"http:///hook\"\nsecret = \"s\"\n", "memory.url"},
		{"memory misspelt key", "[memory]\nurll = \"https://memory.example/\"\n", "urll"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "corral.toml")
			if err := os.WriteFile(path, []byte(c.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := Default()
			err := Load(path, &cfg)
			if err == nil {
				err = cfg.Validate()
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one about %q", err, c.want)
			}
		})
	}
	if cfg := Default(); cfg.Summary.MaxChars != collect.DefaultSummaryChars || cfg.Memory.URL != "" {
		t.Errorf("defaults: summary.max_chars %d, memory.url %q", cfg.Summary.MaxChars, cfg.Memory.URL)
	}
}

// TestRunscBuildLock: the lock a runsc build holds is an absolute path, or
// empty for scripts/deps.sh's own.
func TestRunscBuildLock(t *testing.T) {
	for lock, ok := range map[string]bool{"": true, "/var/cache/corral/runsc.lock": true, "runsc.lock": false} {
		cfg := Default()
		cfg.MaxConcurrency = 1
		cfg.RunscBuildLock = lock
		if err := cfg.Validate(); (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "runsc_build_lock") {
			t.Errorf("runsc_build_lock %q: %v", lock, err)
		}
	}
}
