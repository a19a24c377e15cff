package httpbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/corralhq/corral/internal/fault"
)

type limits struct {
	TimeoutMS int64 `json:"timeout_ms"`
}

type request struct {
	Language string   `json:"language"`
	Timeout  *int64   `json:"timeout"`
	Limits   limits   `json:"limits"`
	Args     []string `json:"args"`
}

func TestDecode(t *testing.T) {
	strict := Rules{KnownFields: true, Required: true}
	cases := []struct {
		body  string
		rules Rules
		ok    bool
		code  string // the fault's code when refused
		field string
	}{
		{`{"language":"python"}`, strict, true, "", ""},
		{"{\"language\":\"python\"} \t\r\n", strict, true, "", ""},
		{`null`, strict, true, "", ""},
		{``, strict, false, "invalid_json", ""},
		{" \n", strict, false, "invalid_json", ""},
		{``, Rules{}, true, "", ""},
		{" \n", Rules{}, true, "", ""},
		// One value, nothing after it.
		{`{} x`, Rules{}, false, "invalid_json", ""},
		{`{}{}`, Rules{}, false, "invalid_json", ""},
		{`{} }`, Rules{}, false, "invalid_json", ""},
		{`{} ]`, Rules{}, false, "invalid_json", ""},
		{`{} null`, Rules{}, false, "invalid_json", ""},
		{"{}\u00a0", Rules{}, false, "invalid_json", ""}, // not JSON's white space
		{"{}\x00", Rules{}, false, "invalid_json", ""},
		{`{`, Rules{}, false, "invalid_json", ""},
		{`{"language":`, Rules{}, false, "invalid_json", ""},
		{`[]`, Rules{}, false, "invalid_json", ""},
		{`"x"`, Rules{}, false, "invalid_json", ""},
		// Unknown fields: refused by KnownFields, else ignored.
		{`{"limit":{}}`, strict, false, "", "limit"},
		{`{"limit":{}}`, Rules{}, true, "", ""},
		// encoding/json names an unknown field without its path.
		{`{"limits":{"timeout":1}}`, strict, false, "", "timeout"},
		// Types and ranges of JSON numbers: the field is named.
		{`{"language":5}`, Rules{}, false, "", "language"},
		{`{"timeout":"soon"}`, Rules{}, false, "", "timeout"},
		{`{"timeout":1.5}`, Rules{}, false, "", "timeout"},
		{`{"timeout":9223372036854775808}`, Rules{}, false, "", "timeout"},
		{`{"timeout":-9223372036854775809}`, Rules{}, false, "", "timeout"},
		{`{"timeout":-9223372036854775808}`, Rules{}, true, "", ""}, // in range: the caller's range check refuses it
		{`{"limits":{"timeout_ms":1e99}}`, Rules{}, false, "", "limits.timeout_ms"},
		{`{"args":"x"}`, Rules{}, false, "", "args"},
	}
	for _, c := range cases {
		var req request
		err := Decode([]byte(c.body), &req, c.rules)
		if c.ok {
			if err != nil {
				t.Errorf("%q: %v", c.body, err)
			}
			continue
		}
		f := fault.Of(err)
		if err == nil || f.Kind != fault.InvalidArgument || f.Code != c.code || f.Field != c.field || f.Message == "" {
			t.Errorf("%q: %+v; want an invalid argument, code %q, field %q", c.body, f, c.code, c.field)
		}
		if c.code == "invalid_json" && !errors.Is(err, ErrJSON) {
			t.Errorf("%q: %v is not ErrJSON", c.body, err)
		}
	}
}

// FuzzDecode: any body decodes into the request or is refused as an
// invalid argument, never a panic or another kind; what decodes is one
// JSON value with nothing after it.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"language":"python","timeout":5}`, `{} x`, `{}{}`, `null`, ``, `{"limits":{"timeout_ms":-1}}`,
		`{"args":["a","b"]}`, "{}\u00a0", `{"timeout":-9223372036854775808}`, `[`, `{"limit":1}`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, known bool) {
		var req request
		err := Decode(body, &req, Rules{KnownFields: known})
		if err != nil {
			if k := fault.KindOf(err); k != fault.InvalidArgument {
				t.Fatalf("%q: kind %v: %v", body, k, err)
			}
			return
		}
		if trimmed := bytes.Trim(body, jsonSpace); len(trimmed) > 0 && !json.Valid(trimmed) {
			t.Fatalf("%q accepted but is not one JSON value", body)
		}
	})
}
