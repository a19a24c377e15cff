// Command callback receives an execution's result by callback: it serves a
// local HTTP endpoint, submits code with that callback_url, and checks the
// Corral-Signature of the delivery with the tenant's callback secret
// (CORRAL_CALLBACK_SECRET) before trusting it.
//
// The server must be able to reach the receiver: for a receiver on this
// machine, set [callbacks] allow_private = true in the server's config.
// CORRAL_CALLBACK_ADDR sets the listen address (default 127.0.0.1:0).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/corralhq/corral/sandbox"
)

func main() {
	secret := []byte(os.Getenv("CORRAL_CALLBACK_SECRET"))
	addr := os.Getenv("CORRAL_CALLBACK_ADDR")
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fail("listen", err)
	}
	results := make(chan *sandbox.Result, 1)
	var mu sync.Mutex
	seen := map[string]bool{} // deliveries can repeat: de-duplicate by execution id
	mux := http.NewServeMux()
	mux.HandleFunc("POST /corral/callback", func(w http.ResponseWriter, r *http.Request) {
		res, err := sandbox.ReadCallback(r, secret, 5*time.Minute)
		if err != nil {
			// Not from Corral, or tampered with: refuse it.
			slog.Warn("callback refused", "err", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		fmt.Printf("callback verified: delivery %s for %s\n", r.Header.Get(sandbox.HeaderDeliveryID),
			r.Header.Get(sandbox.HeaderIdempotent))
		mu.Lock()
		first := !seen[res.ExecutionID]
		seen[res.ExecutionID] = true
		mu.Unlock()
		if first {
			results <- res
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	client := sandbox.NewClient(sandbox.Config{
		Endpoint:   os.Getenv("CORRAL_ENDPOINT"),
		APIKey:     os.Getenv("CORRAL_API_KEY"),
		Timeout:    time.Minute,
		MaxRetries: 3,
	})
	ctx := context.Background()
	execID, err := client.Submit(ctx, sandbox.ExecuteRequest{
		Language:    "python",
		Code:        "print('hello from a callback')",
		CallbackURL: "http://" + ln.Addr().String() + "/corral/callback",
	})
	if err != nil {
		fail("submit", err)
	}
	fmt.Println("submitted:", execID)
	select {
	case res := <-results:
		fmt.Printf("result: %s %s %q\n", res.ExecutionID, res.Status, res.Stdout)
	case <-time.After(2 * time.Minute):
		fail("callback", fmt.Errorf("no callback for %s within 2 minutes", execID))
	}
}

func fail(what string, err error) {
	slog.Error(what, "err", err)
	os.Exit(1)
}
