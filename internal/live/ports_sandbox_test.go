package live

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestDialPortSandbox: on real sandboxes of both tiers, a python HTTP
// server started in the sandbox answers GETs through DialPort, many at
// once, a large file whole; a port nothing listens on is ErrPortClosed.
func TestDialPortSandbox(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			r := newOnRuntimes(t, DefaultConfig())
			m := r.m
			ctx := t.Context()
			if _, err := m.Create(ctx, "t", sandbox.CreateSandboxRequest{SandboxID: "box", Language: "python",
				Tier: sandbox.Isolation(tier), TimeoutSeconds: 600}); err != nil {
				t.Fatal(err)
			}
			small := make([]byte, 1024)
			big := make([]byte, 24<<20)
			rand.Read(small)
			rand.Read(big)
			for name, b := range map[string][]byte{"small.bin": small, "big.bin": big} {
				if _, err := m.WriteFile(ctx, "t", "box", "/workspace/www/"+name, bytes.NewReader(b)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := m.StartProcess(ctx, "t", "box", sandbox.StartProcessRequest{
				Cmd: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/www"}}); err != nil {
				t.Fatal(err)
			}
			s, err := m.Get("t", "box")
			if err != nil {
				t.Fatal(err)
			}
			waitPort(t, s, 8000)
			client := &http.Client{Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return s.DialPort(ctx, 8000) },
			}}
			get := func(path string) []byte {
				t.Helper()
				res, err := client.Get("http://sandbox" + path)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, err := io.ReadAll(res.Body)
				if err != nil || res.StatusCode != 200 {
					t.Fatalf("GET %s: %d, %v", path, res.StatusCode, err)
				}
				return b
			}
			if !bytes.Equal(get("/big.bin"), big) {
				t.Fatal("big.bin came back different")
			}
			errs := make(chan error, 16)
			for range 16 {
				go func() {
					if b := get("/small.bin"); !bytes.Equal(b, small) {
						errs <- errors.New("small.bin came back different")
						return
					}
					errs <- nil
				}()
			}
			for range 16 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			if _, err := s.DialPort(ctx, 8001); !errors.Is(err, ErrPortClosed) {
				t.Errorf("port 8001: %v, want ErrPortClosed", err)
			}
		})
	}
}

// waitPort waits for a server to listen on port in s.
func waitPort(t *testing.T, s *Sandbox, port int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := s.DialPort(t.Context(), port)
		if err == nil {
			c.Close()
			return
		}
		if !errors.Is(err, ErrPortClosed) || time.Now().After(deadline) {
			t.Fatalf("port %d: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
