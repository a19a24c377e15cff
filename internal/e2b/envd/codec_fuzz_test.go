package envd

import (
	"reflect"
	"testing"
)

// FuzzCodec: any body decodes into every request message or is refused,
// never a panic; what decodes writes back and reads again as the same.
func FuzzCodec(f *testing.F) {
	for _, seed := range []string{
		`{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"],"envs":{"A":"1"},"cwd":"/tmp"},"pty":{"size":{"cols":80,"rows":"24"}},"tag":"x","stdin":true}`,
		`{"process":{"pid":"12"},"input":{"stdin":"aGk="}}`,
		`{"process":{"tag":"t"},"signal":"SIGNAL_SIGKILL"}`,
		`{"path":"/workspace","depth":2,"recursive":true,"includeEntry":true}`,
		`{"watcherId":"abc"}`, `{}`, ``, `null`, `[`, `{"signal":1e400}`, `{"input":{"pty":"_-"}}`,
	} {
		f.Add([]byte(seed))
	}
	msgs := []func() any{
		func() any { return &StartRequest{} }, func() any { return &ConnectRequest{} }, func() any { return &SendInputRequest{} },
		func() any { return &SendSignalRequest{} }, func() any { return &UpdateRequest{} }, func() any { return &CloseStdinRequest{} },
		func() any { return &ListDirRequest{} }, func() any { return &WatchDirRequest{} }, func() any { return &MoveRequest{} },
		func() any { return &CreateWatcherRequest{} }, func() any { return &GetWatcherEventsRequest{} }, func() any { return &EntryInfo{} },
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c := jsonCodec{}
		for _, m := range msgs {
			v := m()
			if c.Unmarshal(body, v) != nil {
				continue
			}
			out, err := c.Marshal(v)
			if err != nil {
				t.Fatalf("%T decoded from %q does not encode: %v", v, body, err)
			}
			again := m()
			if err := c.Unmarshal(out, again); err != nil {
				t.Fatalf("%T: its own encoding %s does not decode: %v", v, out, err)
			}
			if !reflect.DeepEqual(v, again) {
				t.Fatalf("%T: %+v became %+v through %s", v, v, again, out)
			}
		}
	})
}
