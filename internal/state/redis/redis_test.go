package redis_test

import (
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	goredis "github.com/redis/go-redis/v9"

	"github.com/corralhq/corral/internal/state"
	"github.com/corralhq/corral/internal/state/redis"
	"github.com/corralhq/corral/internal/state/statetest"
	"github.com/corralhq/corral/internal/testenv"
)

func TestMain(m *testing.M) { statetest.Main(m, testenv.StopRedis) }

func open(t *testing.T, url string) *redis.State {
	t.Helper()
	s, err := redis.Open(t.Context(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// TestState runs the conformance suite. Each test gets a prefix of its
// own; every State it opens is a separate client on that prefix, as the
// nodes of one deployment are.
func TestState(t *testing.T) {
	var (
		mu     sync.Mutex
		byTest = map[*testing.T]string{}
	)
	statetest.Run(t, func(t *testing.T) state.State {
		mu.Lock()
		url, ok := byTest[t]
		mu.Unlock()
		if !ok {
			url = testenv.Redis(t)
			mu.Lock()
			byTest[t] = url
			mu.Unlock()
			t.Cleanup(func() {
				mu.Lock()
				delete(byTest, t)
				mu.Unlock()
			})
		}
		return open(t, url)
	})
}

func TestOpenURL(t *testing.T) {
	good := testenv.Redis(t)
	tests := []struct {
		name    string
		url     string
		wantErr string
	}{
		{"prefix", good, ""},
		{"default prefix", strings.Split(good, "?")[0], ""},
		{"unknown option", good + "&colour=blue", "unexpected option: colour"},
		{"bad scheme", "http://127.0.0.1:1/0", "invalid URL scheme"},
		{"not a url", "redis://user:secret@%zz", "invalid URL escape"},
		{"no server", "redis://127.0.0.1:1/0", "connect to redis at 127.0.0.1:1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redis.Open(t.Context(), tc.url, nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded, want error containing %q", tc.url, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Open(%q) = %v, want error containing %q", tc.url, err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Open's error shows the password: %v", err)
			}
		})
	}
}

// TestKeysUnderPrefix checks that a State writes nowhere but under its
// prefix.
func TestKeysUnderPrefix(t *testing.T) {
	ctx := t.Context()
	url := testenv.Redis(t)
	s := open(t, url)
	for _, id := range []string{"x", "y"} {
		if _, err := s.Append(ctx, id, state.EventStdout, []byte("out")); err != nil {
			t.Fatal(err)
		}
	}

	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	prefix := u.Query().Get("prefix")
	u.RawQuery = ""
	opt, err := goredis.ParseURL(u.String())
	if err != nil {
		t.Fatal(err)
	}
	rdb := goredis.NewClient(opt)
	defer rdb.Close()
	var keys []string
	glob := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`, `^`, `\^`)
	iter := rdb.Scan(ctx, 0, glob.Replace(prefix)+"*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, strings.TrimPrefix(iter.Val(), prefix))
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{"events:x", "events:y"}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("keys under %s (-want +got):\n%s", prefix, diff)
	}
}
