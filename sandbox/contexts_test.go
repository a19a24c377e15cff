package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRunCode: a run asks for an event stream, sends the code and the
// timeout, collects the events into an Execution (each also given to
// OnEvent, in order), and is sent once.
func TestRunCode(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path != "/v1/sandboxes/box/contexts/c1/run" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if a := r.Header.Get("Accept"); a != "text/event-stream" {
			t.Errorf("Accept %q", a)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range []string{
			`{"type":"number_of_executions","execution_count":3}`,
			`{"type":"stdout","text":"1\n"}`,
			`{"type":"result","data":{"text/plain":"2","text/html":"<b>2</b>"},"is_main_result":true}`,
			`{"type":"error","name":"ValueError","value":"v","traceback":["a","b"]}`,
			`{"type":"end_of_execution"}`,
		} {
			var typ struct{ Type string }
			_ = json.Unmarshal([]byte(ev), &typ)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", i+1, typ.Type, ev)
		}
	})
	var seen []string
	ex, err := f.client(3).Sandbox("box").RunCode(context.Background(), "c1", "print(1)\n2", RunCodeOptions{Timeout: 5 * time.Second,
		OnEvent: func(ev ContextEvent) { seen = append(seen, ev.Type) }})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seen, " "); got != "number_of_executions stdout result error end_of_execution" {
		t.Errorf("OnEvent saw %s", got)
	}
	if ex.Text() != "2" || ex.Results[0].Data["text/html"] != "<b>2</b>" || ex.ExecutionCount != 3 ||
		strings.Join(ex.Stdout, "") != "1\n" || ex.Error == nil || ex.Error.Name != "ValueError" || len(ex.Error.Traceback) != 2 {
		t.Errorf("execution %+v (error %+v)", ex, ex.Error)
	}
	reqs := f.all()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	if b := reqs[0].body; b.Code != "print(1)\n2" {
		t.Errorf("request body %+v", b)
	}
}

// TestRunCodeFails: an error answer before the stream, a failure event
// inside it, and a stream cut before its end are errors, never retried.
func TestRunCodeFails(t *testing.T) {
	for _, c := range []struct {
		name  string
		serve func(w http.ResponseWriter)
		check func(error) bool
	}{
		{"not found", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no such code context"}}`)
		}, func(err error) bool { return errors.Is(err, ErrNotFound) }},
		{"failure event", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "id: 1\nevent: number_of_executions\ndata: {\"type\":\"number_of_executions\",\"execution_count\":1}\n\n")
			io.WriteString(w, "id: 2\nevent: failure\ndata: {\"error\":{\"code\":\"not_found\",\"message\":\"gone\"}}\n\n")
		}, func(err error) bool {
			var ae *APIError
			return errors.As(err, &ae) && ae.Code == "not_found" && ae.Message == "gone"
		}},
		{"cut", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "id: 1\nevent: stdout\ndata: {\"type\":\"stdout\",\"text\":\"x\"}\n\n")
		}, func(err error) bool {
			var te *TransportError
			return errors.As(err, &te) && errors.Is(err, io.ErrUnexpectedEOF)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) { c.serve(w) })
			_, err := f.client(3).Sandbox("box").RunCode(context.Background(), "c1", "1", RunCodeOptions{})
			if !c.check(err) {
				t.Errorf("error %v", err)
			}
			if n := len(f.all()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}
