package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// JSONLines encodes events one JSON object a line, as the sinks write them.
func JSONLines(events []Event) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range events {
		// Only encodable types: Encode cannot fail.
		_ = enc.Encode(&events[i])
	}
	return b.Bytes()
}

// OpenSink opens the sink dest names: a path (or file:// URL) whose file
// gets the events appended as JSON lines, or an http(s):// URL each batch
// is POSTed to as application/x-ndjson.
func OpenSink(dest string) (Sink, error) {
	switch {
	case strings.HasPrefix(dest, "http://"), strings.HasPrefix(dest, "https://"):
		u, err := url.Parse(dest)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("audit sink %q: not a URL", dest)
		}
		return &WebhookSink{URL: dest, Client: &http.Client{Timeout: 10 * time.Second}}, nil
	case strings.HasPrefix(dest, "file://"):
		return OpenFileSink(strings.TrimPrefix(dest, "file://"))
	case strings.HasPrefix(dest, "/"):
		return OpenFileSink(dest)
	}
	return nil, fmt.Errorf("audit sink %q: use an absolute path, file:///path or an http(s) URL", dest)
}

// FileSink appends events to a file as JSON lines (a SIEM's agent tails
// it). Safe for concurrent use.
type FileSink struct {
	mu sync.Mutex
	f  *os.File
}

// OpenFileSink opens (creating, 0600) the file at path for appending.
func OpenFileSink(path string) (*FileSink, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit sink: %w", err)
	}
	return &FileSink{f: f}, nil
}

// Ship implements Sink: one write of whole lines.
func (s *FileSink) Ship(_ context.Context, events []Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.f.Write(JSONLines(events)); err != nil {
		return fmt.Errorf("audit sink %s: %w", s.f.Name(), err)
	}
	return nil
}

// Close implements Sink.
func (s *FileSink) Close() error { return s.f.Close() }

// WebhookSink POSTs each batch to URL as JSON lines, retried up to three
// times on a network error or a 5xx/429 answer.
type WebhookSink struct {
	URL    string
	Client *http.Client
}

// Ship implements Sink.
func (s *WebhookSink) Ship(ctx context.Context, events []Event) error {
	body := JSONLines(events)
	var last error
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(attempt) * 500 * time.Millisecond):
			case <-ctx.Done():
				return fmt.Errorf("audit webhook: %w (last: %w)", ctx.Err(), last)
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("audit webhook: %w", err)
		}
		req.Header.Set("Content-Type", "application/x-ndjson")
		resp, err := s.Client.Do(req)
		if err != nil {
			last = err
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode < 300:
			return nil
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			last = fmt.Errorf("answered %s", resp.Status)
		default:
			return fmt.Errorf("audit webhook: answered %s", resp.Status)
		}
	}
	return fmt.Errorf("audit webhook: %w", last)
}

// Close implements Sink.
func (s *WebhookSink) Close() error { return nil }
