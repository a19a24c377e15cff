package config

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

// env is a fake environment.
func env(kv map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := kv[k]
		return v, ok
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "corral.toml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPrecedence: defaults < file < CORRAL_* < flags, for a duration, a
// size, a string and two ints, whatever the order of --config among the
// flags.
func TestPrecedence(t *testing.T) {
	mem, err := MemTotal()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		key, flag                        string
		file                             string // the key's value in TOML
		env, arg                         string
		get                              func(Config) any
		def, fromFile, fromEnv, fromFlag any
	}{
		{"sessions.max_ttl", "sessions-max-ttl", `"2h"`, "3h", "90m", func(c Config) any { return c.Sessions.MaxTTL },
			Duration(24 * time.Hour), Duration(2 * time.Hour), Duration(3 * time.Hour), Duration(90 * time.Minute)},
		{"images.budget", "image-budget", `"5GiB"`, "6GiB", "512MiB", func(c Config) any { return c.Images.Budget },
			Size(20 << 30), Size(5 << 30), Size(6 << 30), Size(512 << 20)},
		{"listen", "listen", `"127.0.0.1:9001"`, "127.0.0.1:9002", "127.0.0.1:9003", func(c Config) any { return c.Listen },
			"127.0.0.1:8080", "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"},
		{"pool.max_uses", "pool-max-uses", `3`, "5", "7", func(c Config) any { return c.Pool.MaxUses },
			1000, 3, 5, 7},
		{"max_concurrency", "max-concurrency", `3`, "5", "7", func(c Config) any { return c.MaxConcurrency },
			DeriveConcurrency(mem, 512), 3, 5, 7},
	} {
		t.Run(s.key, func(t *testing.T) {
			file := writeFile(t, s.key+" = "+s.file+"\n")
			envName := EnvName(s.flag)
			for _, c := range []struct {
				name string
				args []string
				env  map[string]string
				want any
			}{
				{"default", nil, nil, s.def},
				{"file", []string{"--config", file}, nil, s.fromFile},
				{"file from env", nil, map[string]string{"CORRAL_CONFIG": file}, s.fromFile},
				{"env", []string{"--config", file}, map[string]string{envName: s.env}, s.fromEnv},
				{"flag", []string{"--config", file, "--" + s.flag, s.arg}, map[string]string{envName: s.env}, s.fromFlag},
				{"flag before --config", []string{"--" + s.flag, s.arg, "--config", file}, map[string]string{envName: s.env}, s.fromFlag},
				{"flag without file", []string{"--" + s.flag, s.arg}, nil, s.fromFlag},
			} {
				cfg, err := Parse("serve", c.args, env(c.env), io.Discard)
				if err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				if got := s.get(cfg); got != c.want {
					t.Errorf("%s: %s = %v, want %v", c.name, s.key, got, c.want)
				}
			}
		})
	}
}

// TestBadValueNamesTheSetting: a value that does not parse is an error,
// wherever it comes from, and the error names the setting.
func TestBadValueNamesTheSetting(t *testing.T) {
	for _, c := range []struct {
		name, file string
		env        map[string]string
		args       []string
		want       string
	}{
		{"duration in file", "[sessions]\nmax_ttl = \"soon\"\n", nil, nil, `sessions.max_ttl`},
		{"duration without unit in file", "[pool]\nidle_timeout = 300\n", nil, nil, `pool.idle_timeout`},
		{"duration in env", "", map[string]string{"CORRAL_SESSIONS_MAX_TTL": "soon"}, nil, `CORRAL_SESSIONS_MAX_TTL="soon"`},
		{"duration in flag", "", nil, []string{"--sessions-max-ttl", "soon"}, `flag -sessions-max-ttl`},
		{"negative duration", "[sessions]\nmax_ttl = \"-1h\"\n", nil, nil, `sessions.max_ttl -1h0m0s: must be positive`},
		{"zero duration in flag", "", nil, []string{"--pool-idle-timeout", "0s"}, `pool.idle_timeout 0s: must be positive`},
		{"lost_after under three heartbeats", "", map[string]string{"CORRAL_CLUSTER_LOST_AFTER": "5s"}, nil, `cluster.lost_after 5s`},
		{"size in file", "[images]\nbudget = \"lots\"\n", nil, nil, `images.budget`},
		{"size in env", "", map[string]string{"CORRAL_IMAGE_BUDGET": "-1G"}, nil, `CORRAL_IMAGE_BUDGET`},
		{"size in flag", "", nil, []string{"--image-budget", "20 parsecs"}, `flag -image-budget`},
		{"log level in file", "[log]\nlevel = \"verbose\"\n", nil, nil, `log.level`},
		{"log level in env", "", map[string]string{"CORRAL_LOG_LEVEL": "INFO"}, nil, `CORRAL_LOG_LEVEL`},
		{"int in env", "", map[string]string{"CORRAL_MAX_CONCURRENCY": "many"}, nil, `CORRAL_MAX_CONCURRENCY`},
		{"bool in flag", "", nil, []string{"--callbacks-allow-private=maybe"}, `-callbacks-allow-private`},
		{"image map in flag", "", nil, []string{"--default-images", "python"}, `flag -default-images`},
		{"string in file", "listen = 8080\n", nil, nil, `listen`},
		{"unknown key", "listn = \"0.0.0.0:80\"\n", nil, nil, `unknown settings listn`},
		{"unknown key in a section", "[sessions]\nmax_tll = \"1h\"\n", nil, nil, `unknown settings sessions.max_tll`},
		{"relative runsc lock", "", map[string]string{"CORRAL_RUNSC_BUILD_LOCK": "runsc.lock"}, nil, `runsc_build_lock "runsc.lock"`},
		{"argument", "", nil, []string{"extra"}, `unexpected arguments [extra]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := c.args
			if c.file != "" {
				args = append([]string{"--config", writeFile(t, c.file)}, args...)
			}
			_, err := Parse("serve", args, env(c.env), io.Discard)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

// TestEnvErrorIsPrinted: like the flag package's own errors, a CORRAL_*
// variable's is printed to the flag set's output, for commands that exit
// on the error without a word.
func TestEnvErrorIsPrinted(t *testing.T) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	l := DefaultLocal()
	RegisterFlags(fs, &l)
	set, err := ParseFlags(fs, []string{"--runc", "/bin/runc"}, env(map[string]string{"CORRAL_RUNC": "/env/runc", "CORRAL_DATA_DIR": "/d", "CORRAL_IMAGE_BUDGET": "x"}))
	if err == nil || !strings.Contains(out.String(), `CORRAL_IMAGE_BUDGET="x"`) {
		t.Fatalf("error %v, output %q", err, out.String())
	}
	if l.Runc != "/bin/runc" || l.DataDir != "/d" || !set["runc"] || !set["data-dir"] {
		t.Errorf("runc %q, data dir %q, set %v", l.Runc, l.DataDir, set)
	}
}

// TestEveryFlagIsItsKey: no field is silently ignored. Each flag sets a
// field, the one its key sets in the file; every exported field is a
// setting of the file (or of flags alone); every setting of the file that
// holds one value has a flag.
func TestEveryFlagIsItsKey(t *testing.T) {
	def := Default()
	c := Default()
	all := settings(&c)
	names := map[string]bool{}
	for _, s := range all {
		if names[s.name] {
			t.Errorf("flag %s twice", s.name)
		}
		names[s.name] = true
		arg, lit := sample(t, s)
		viaFlag := Default()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		RegisterFlags(fs, &viaFlag)
		if err := fs.Set(s.name, arg); err != nil {
			t.Fatalf("--%s %s: %v", s.name, arg, err)
		}
		if reflect.DeepEqual(viaFlag, def) {
			t.Errorf("--%s %s changes nothing", s.name, arg)
		}
		if s.key == "" {
			continue // flag and environment only
		}
		viaFile := Default()
		if err := Load(writeFile(t, s.key+" = "+lit+"\n"), &viaFile); err != nil {
			t.Fatalf("%s = %s: %v", s.key, lit, err)
		}
		if !reflect.DeepEqual(viaFlag, viaFile) {
			t.Errorf("--%s %s and %s = %s set different fields", s.name, arg, s.key, lit)
		}
	}
	// Every exported field is a setting: of the file (a toml tag), or of
	// flags alone; and every setting of the file holding one value has a
	// flag.
	var walk func(t reflect.Type, key string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			sf := typ.Field(i)
			tag, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
			one := oneValue(reflect.New(sf.Type).Interface())
			switch {
			case sf.Anonymous && tag == "":
				walk(sf.Type, prefix)
			case tag == "":
				t.Errorf("%s%s has no toml tag", prefix, sf.Name)
			case tag == "-":
				if !names[sf.Tag.Get("flag")] {
					t.Errorf("%s%s is neither in the file nor a flag", prefix, sf.Name)
				}
			case sf.Type.Kind() == reflect.Struct && !one:
				walk(sf.Type, prefix+tag+".")
			case one:
				if !slices.ContainsFunc(all, func(s setting) bool { return s.key == prefix+tag }) {
					t.Errorf("%s%s has no flag", prefix, tag)
				}
			}
		}
	}
	walk(reflect.TypeFor[Config](), "")
}

// sample is a value for s unlike its default, as a flag and as TOML.
func sample(t *testing.T, s setting) (arg, lit string) {
	switch p := s.field.(type) {
	case *Duration:
		return "7s", `"7s"`
	case *Size:
		return "7MiB", `"7MiB"`
	case *LogLevel:
		return "debug", `"debug"`
	case *ImageMap:
		return "python=x", `{ python = "x" }`
	case *string:
		return "127.0.0.1:7", `"127.0.0.1:7"`
	case *bool:
		// The other value than the default (the field is bound to
		// Default's): [audit] enabled is on unless set.
		if *p {
			return "false", "false"
		}
		return "true", "true"
	case *int, *int64:
		return "7", "7"
	case *float64:
		return "7.5", "7.5"
	default:
		t.Fatalf("flag %s: no sample of %T", s.name, p)
	}
	return
}

// TestExistingFlags: the flags and variables docs, tests and scripts use
// keep their names.
func TestExistingFlags(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	RegisterFlags(fs, &c)
	for _, name := range []string{"listen", "data-dir", "store", "state", "blob", "api-key", "callback-secret", "node-id",
		"advertise-address", "log-level", "log-format", "max-concurrency", "queue-bound", "cache-dir", "cgroup-parent",
		"runc", "runsc", "runsc-build-lock", "image-dir", "image-budget", "default-images", "memory-secret",
		"tls-cert", "tls-key", "tls-peer-ca"} {
		if fs.Lookup(name) == nil {
			t.Errorf("no --%s", name)
		}
	}
	for name := range usage {
		if fs.Lookup(name) == nil {
			t.Errorf("usage of --%s, which is no flag", name)
		}
	}
	l := DefaultLocal()
	fs = flag.NewFlagSet("image", flag.ContinueOnError)
	RegisterFlags(fs, &l, "data-dir", "image-dir", "image-budget", "default-images")
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n != 4 {
		t.Errorf("%d flags, want the 4 named", n)
	}
	defer func() {
		if recover() == nil {
			t.Error("a flag that is no setting registered")
		}
	}()
	RegisterFlags(flag.NewFlagSet("x", flag.ContinueOnError), &l, "listen")
}

// TestRoundTrip: the defaults written as TOML read back the same, so each
// type's text form is the one it reads.
func TestRoundTrip(t *testing.T) {
	c := Default()
	c.Images.Defaults = ImageMap{"python": "python"}
	c.Images.Budget = Size(1536 << 20)
	c.Log.Level = LogLevel(-4)
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(c); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`budget = "1536MiB"`, `idle_timeout = "5m0s"`, `level = "debug"`, `data_dir = "/var/lib/corral"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("encoded config lacks %s:\n%s", want, buf.String())
		}
	}
	got := Config{}
	if err := Load(writeFile(t, buf.String()), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("read back\n%+v\nwant\n%+v", got, c)
	}
}
