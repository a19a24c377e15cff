package config

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
)

// Flags and the environment set the settings of the file that hold one
// value (strings, numbers, booleans, durations, sizes, the image map), each
// bound to its field: the flag is named after the key (sessions.max_ttl is
// --sessions-max-ttl) unless the field's `flag` tag names it, and every flag
// also reads CORRAL_<NAME> with dashes as underscores
// (CORRAL_SESSIONS_MAX_TTL). Lists and tables ([[tenants]], [[pool.warm]],
// network.allow) are the file's only.

// setting is one setting flags and the environment can set.
type setting struct {
	name  string // the flag's, without dashes: "sessions-max-ttl"
	key   string // the file's, "sessions.max_ttl"; empty for flag-only settings (api-key)
	usage string
	field any // a *string, *bool, *int, *int64, *float64 or flag.Value
}

// usage describes the flags operators use most; the others name their key.
var usage = map[string]string{
	"listen":            "address to listen on",
	"store":             "records store: a SQLite path or sqlite:// URL, or a postgres:// URL (default: SQLite in the data dir)",
	"state":             "live state: memory or a redis:// URL (?prefix= scopes keys)",
	"blob":              "artifact storage: empty for a directory in the data dir, or an s3:// URL",
	"api-key":           "an API key for the tenant \"default\" (development; production keys go in the config file, hashed)",
	"callback-secret":   "signs the tenant \"default\"'s callbacks (default: its API key)",
	"node-id":           "this node's name in shared state (default: hostname/listen address)",
	"advertise-address": "where the other nodes reach this one's API, host:port (default: the listen address)",
	"log-level":         "`level`: debug, info (the default), warn or error",
	"log-format":        "json or text",
	"max-concurrency":   "executions this node runs at once (0: from memory)",
	"queue-bound":       "maximum queued executions before 429 (0: 4 × max-concurrency)",
	"drain-timeout":     "on SIGTERM, how long running executions may take to finish (a `duration`; what has not started is handed back at once)",
	"data-dir":          "directory for sandboxes, images and local state",
	"cache-dir":         "directory for warmed language build caches (default DATA-DIR/cache)",
	"cgroup-parent":     "cgroup under which sandboxes are placed",
	"runc":              "runc binary (default: the pinned one in /opt/corral/bin, else PATH)",
	"runsc":             "runsc binary for the gvisor tier (default: pinned, else PATH; \"off\" disables the tier)",
	"runsc-build-lock":  "lock scripts/deps.sh holds while it builds runsc: while held and runsc is missing, the gvisor tier is pending (default /var/cache/corral/runsc.lock)",
	"image-dir":         "directory for images (default DATA-DIR/images)",
	"image-budget":      "disk space built and imported images may use, a `size` such as 20GiB; the least recently used images not in use are evicted to make room",
	"tls-cert":          "serve https with this PEM certificate chain (leaf first), read again when it changes; with --tls-key",
	"tls-key":           "the PEM key of --tls-cert",
	"tls-peer-ca":       "PEM bundle of the CAs the other nodes' certificates are verified with (default: the system's roots)",
	"tracing-endpoint":  "send OpenTelemetry traces to this OTLP/HTTP collector URL, such as http://otel-collector:4318 (default: off)",
	"default-images":    "each language's default image, `language=image,...` such as python=python,javascript=node (default: host for every language)",
}

// settings lists the settings of v, a *Config or a *Local, that flags can
// set, bound to v's fields.
func settings(v any) []setting {
	var out []setting
	listSettings(reflect.ValueOf(v).Elem(), "", &out)
	return out
}

func listSettings(v reflect.Value, prefix string, out *[]setting) {
	for i := range v.NumField() {
		sf, fv := v.Type().Field(i), v.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
		name := sf.Tag.Get("flag")
		switch {
		case !sf.IsExported() || name == "-":
			continue
		case sf.Anonymous && key == "":
			listSettings(fv, prefix, out) // an embedded struct's keys are this level's
			continue
		case key == "-":
			key = "" // not in the file
		case key == "":
			key = prefix + sf.Name
		default:
			key = prefix + key
		}
		field := fv.Addr().Interface()
		if !oneValue(field) {
			if fv.Kind() == reflect.Struct && key != "" {
				listSettings(fv, key+".", out) // a section
			}
			continue // else a list or a table: the file's only
		}
		if name == "" && key == "" {
			continue
		}
		if name == "" {
			name = strings.NewReplacer(".", "-", "_", "-").Replace(key)
		}
		u := usage[name]
		if u == "" {
			u = "the config file's " + key
			switch field.(type) { // a `word` names the flag's argument in its help
			case *Duration:
				u += ", a `duration`"
			case *Size:
				u += ", a `size`"
			}
		}
		*out = append(*out, setting{name: name, key: key, usage: u, field: field})
	}
}

// oneValue reports whether field, a pointer, holds a value a flag can set.
func oneValue(field any) bool {
	switch field.(type) {
	case *string, *bool, *int, *int64, *float64, flag.Value:
		return true
	}
	return false
}

// RegisterFlags adds the settings of v (a *Config or a *Local) that hold
// one value to fs as flags bound to v's fields, their defaults v's values:
// all of them, or those named.
func RegisterFlags(fs *flag.FlagSet, v any, only ...string) {
	n := 0
	for _, s := range settings(v) {
		if len(only) > 0 && !slices.Contains(only, s.name) {
			continue
		}
		switch p := s.field.(type) {
		case *string:
			fs.StringVar(p, s.name, *p, s.usage)
		case *bool:
			fs.BoolVar(p, s.name, *p, s.usage)
		case *int:
			fs.IntVar(p, s.name, *p, s.usage)
		case *int64:
			fs.Int64Var(p, s.name, *p, s.usage)
		case *float64:
			fs.Float64Var(p, s.name, *p, s.usage)
		case flag.Value:
			fs.Var(p, s.name, s.usage)
		}
		n++
	}
	if len(only) > 0 && n != len(only) {
		panic(fmt.Sprintf("config: flags %v are not all settings of %T", only, v))
	}
}

// EnvName is the environment variable a flag also reads.
func EnvName(flag string) string {
	return "CORRAL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ParseFlags parses args into fs, then sets every flag not on the command
// line from its CORRAL_<NAME> variable, if set, so deployments can
// configure by environment alone. It returns the names of the flags that
// are set, from either source. Like fs.Parse, it prints an error to
// fs.Output() as well as returning it.
func ParseFlags(fs *flag.FlagSet, args []string, lookupEnv func(string) (string, bool)) (map[string]bool, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := EnvName(f.Name)
		if v, ok := lookupEnv(name); ok {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
				fmt.Fprintln(fs.Output(), err)
			}
			set[f.Name] = true
		}
	})
	return set, err
}

// Parse makes corral serve's configuration from its arguments and
// environment, in increasing precedence: the defaults, the TOML file named
// by --config (or CORRAL_CONFIG), CORRAL_<NAME> variables, flags. The
// result is validated.
func Parse(name string, args []string, lookupEnv func(string) (string, bool), output io.Writer) (Config, error) {
	c := Default()
	file, err := parseOnto(&c, name, args, lookupEnv, output)
	if err != nil {
		return c, err
	}
	if file != "" {
		// The file goes under the environment and the flags, which name
		// it: load it over the defaults, then set them again on it (the
		// first pass has checked every value).
		c = Default()
		if err := Load(file, &c); err != nil {
			return c, err
		}
		if _, err := parseOnto(&c, name, args, lookupEnv, io.Discard); err != nil {
			return c, err
		}
	}
	return c, c.Validate()
}

// parseOnto sets c's fields from flags and the environment and returns the
// config file they name.
func parseOnto(c *Config, name string, args []string, lookupEnv func(string) (string, bool), output io.Writer) (file string, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&file, "config", "", "TOML configuration file (docs/production.md)")
	RegisterFlags(fs, c)
	if _, err := ParseFlags(fs, args, lookupEnv); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return file, nil
}
