package config

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/images"
)

// The types below are settings parsed once, where they are read (the file,
// a flag, a CORRAL_* variable): each is an encoding.TextUnmarshaler, which
// the TOML decoder uses, and a flag.Value. Their text forms round-trip.

// Duration is a Go duration: "30s", "5m", "1h30m".
type Duration time.Duration

func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration such as 30s or 5m", b)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
func (d Duration) String() string               { return time.Duration(d).String() }
func (d *Duration) Set(s string) error          { return d.UnmarshalText([]byte(s)) }

// Size is a number of bytes, written as images.ParseSize reads it: "20GiB",
// "512M", "1.5g" or a plain number of bytes.
type Size int64

func (s *Size) UnmarshalText(b []byte) error {
	n, err := images.ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

func (s Size) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
func (s *Size) Set(v string) error          { return s.UnmarshalText([]byte(v)) }

// String writes s exactly, in the largest binary unit that divides it.
func (s Size) String() string {
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s != 0 && int64(s)%u.n == 0 {
			return strconv.FormatInt(int64(s)/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// LogLevel is debug, info, warn or error.
type LogLevel slog.Level

var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

func (l *LogLevel) UnmarshalText(b []byte) error {
	v, ok := logLevels[string(b)]
	if !ok {
		return fmt.Errorf("%q: use debug, info, warn or error", b)
	}
	*l = LogLevel(v)
	return nil
}

func (l LogLevel) MarshalText() ([]byte, error) { return []byte(l.String()), nil }
func (l LogLevel) String() string               { return strings.ToLower(slog.Level(l).String()) }
func (l *LogLevel) Set(s string) error          { return l.UnmarshalText([]byte(s)) }

// ImageMap maps a language to an image: a TOML table in the file,
// "language=image,..." in a flag. A flag replaces the whole map.
type ImageMap map[string]string

func (m *ImageMap) String() string {
	if m == nil {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(*m)) {
		parts = append(parts, k+"="+(*m)[k])
	}
	return strings.Join(parts, ",")
}

func (m *ImageMap) Set(s string) error {
	out := ImageMap{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || v == "" {
			return fmt.Errorf("%q: use language=image", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	*m = out
	return nil
}
