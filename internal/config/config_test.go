package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/collect"
)

// TestSummaryAndMemory: the [summary], [memory] and [e2b] sections load
// from TOML and Validate refuses what cannot work.
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
		{"e2b domain", "[e2b]\ndomain = \"sb.example.com\"\n", ""},
		{"e2b domain with a scheme", "[e2b]\ndomain = \"https://sb.example.com\"\n", "e2b.domain"},
		{"e2b domain upper case", "[e2b]\ndomain = \"SB.example.com\"\n", "e2b.domain"},
		{"e2b domain with a port", "[e2b]\ndomain = \"sb.example.com:443\"\n", "e2b.domain"},
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

// TestTLS: [tls] takes a certificate with its key, and a peer CA only
// with them; the public URL a node signs links with is https then.
func TestTLS(t *testing.T) {
	for _, c := range []struct {
		name, toml string
		want       string // substring of the error; "" for none
		public     string // the derived public_url's scheme
	}{
		{"none", ``, "", "http://"},
		{"pair", "[tls]\ncert = \"/etc/corral/tls.crt\"\nkey = \"/etc/corral/tls.key\"\n", "", "https://"},
		{"pair and peer CA", "[tls]\ncert = \"c\"\nkey = \"k\"\npeer_ca = \"/etc/corral/ca.pem\"\n", "", "https://"},
		{"cert alone", "[tls]\ncert = \"c\"\n", "give both or neither", ""},
		{"key alone", "[tls]\nkey = \"k\"\n", "give both or neither", ""},
		{"peer CA alone", "[tls]\npeer_ca = \"ca.pem\"\n", "tls.peer_ca", ""},
		{"misspelt", "[tls]\ncertificate = \"c\"\n", "tls.certificate", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			cfg.MaxConcurrency = 1
			err := Load(writeFile(t, c.toml), &cfg)
			if err == nil {
				err = cfg.Validate()
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one about %q", err, c.want)
			case c.want == "" && !strings.HasPrefix(cfg.PublicURL, c.public):
				t.Errorf("public_url %q, want %s...", cfg.PublicURL, c.public)
			}
		})
	}
}

// TestTracing: [tracing] is off by default, loads from TOML and from
// CORRAL_TRACING_* variables, and Validate refuses what the exporter
// cannot take.
func TestTracing(t *testing.T) {
	for _, c := range []struct {
		name, toml string
		want       string // substring of the error; "" for none
	}{
		{"off", ``, ""},
		{"on", "[tracing]\nendpoint = \"http://otel-collector:4318\"\nsample_ratio = 0.25\nservice_name = \"corral-eu\"\n", ""},
		{"endpoint without a scheme", "[tracing]\nendpoint = \"otel-collector:4318\"\n", "tracing.endpoint"},
		{"ratio above one", "[tracing]\nsample_ratio = 2.0\n", "tracing.sample_ratio"},
		{"no service name", "[tracing]\nendpoint = \"http://c:4318\"\nservice_name = \"\"\n", "tracing.service_name"},
		{"misspelt", "[tracing]\nendpont = \"http://c:4318\"\n", "tracing.endpont"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Default()
			cfg.MaxConcurrency = 1
			err := Load(writeFile(t, c.toml), &cfg)
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
	d := Default()
	if tc := d.TracingConfig(); tc.On() || tc.SampleRatio != 1 || tc.ServiceName != "corral" {
		t.Errorf("default tracing: %+v", tc)
	}
	env := map[string]string{"CORRAL_TRACING_ENDPOINT": "https://otlp.example.com", "CORRAL_TRACING_SAMPLE_RATIO": "0.5",
		"CORRAL_MAX_CONCURRENCY": "1", "CORRAL_NODE_ID": "n1"}
	cfg, err := Parse("serve", nil, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if tc := cfg.TracingConfig(); tc.Endpoint != "https://otlp.example.com" || tc.SampleRatio != 0.5 || tc.NodeID != "n1" {
		t.Errorf("from the environment: %+v", tc)
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

// TestDocumentedFiles: the configuration the docs show loads, with the
// keys and string forms ("30s", "20GiB") files have always had.
func TestDocumentedFiles(t *testing.T) {
	for _, d := range []struct {
		doc    string
		blocks []int // the TOML blocks that are corral.toml (images.md's first is a recipe)
	}{{"production.md", []int{0}}, {"pool.md", []int{0}}, {"images.md", []int{1}}} {
		b, err := os.ReadFile(filepath.Join("..", "..", "docs", d.doc))
		if err != nil {
			t.Fatal(err)
		}
		blocks := strings.Split(string(b), "```toml\n")[1:]
		for _, i := range d.blocks {
			if i >= len(blocks) {
				t.Errorf("%s has no TOML block %d", d.doc, i+1)
				continue
			}
			block, _, _ := strings.Cut(blocks[i], "```")
			path := filepath.Join(t.TempDir(), "corral.toml")
			if err := os.WriteFile(path, []byte(dedent(block)), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := Default()
			if err := Load(path, &cfg); err != nil {
				t.Errorf("%s, TOML block %d: %v", d.doc, i+1, err)
			}
		}
	}
}

// dedent removes the indentation of a block nested in a list item.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := len(lines[0]) - len(strings.TrimLeft(lines[0], " "))
	for i, l := range lines {
		lines[i] = l[min(indent, len(l)-len(strings.TrimLeft(l, " "))):]
	}
	return strings.Join(lines, "\n")
}
