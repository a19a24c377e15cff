package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.toml", "listen = \"0.0.0.0:8080\"\nmax_concurrency = 4\n[log]\nlevel = \"warn\"\n")
	unknown := write("unknown.toml", "listen = \"0.0.0.0:8080\"\ndrian_timeout = \"5m\"\n")
	invalid := write("invalid.toml", "[log]\nlevel = \"loud\"\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want int
	}{
		{"defaults", []string{"check"}, nil, 0},
		{"file", []string{"check", "--config", good}, nil, 0},
		{"file from the environment", []string{"check"}, map[string]string{"CORRAL_CONFIG": good}, 0},
		{"unknown key", []string{"check", "--config", unknown}, nil, 1},
		{"invalid value", []string{"check", "--config", invalid}, nil, 1},
		{"environment overrides the file", []string{"check", "--config", good}, map[string]string{"CORRAL_LISTEN": "nonsense"}, 1},
		{"missing file", []string{"check", "--config", filepath.Join(dir, "absent.toml")}, nil, 1},
		{"no subcommand", nil, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if got := cmdConfig(tc.args); got != tc.want {
				t.Errorf("corral config %v = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}
