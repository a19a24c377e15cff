package badinput

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// A field of a JSON body, as its schema or an example of it says: path
// is its keys from the top, "[]" standing for an array's item.
type leaf struct {
	path []string
	kind string // string, integer, number, boolean, array, object, map, any
	elem string // an array's items' kind or a map's values' kind
}

func (l leaf) name() string { return strings.Join(l.path, ".") }

// The hostile values.
var (
	mib         = strings.Repeat("x", 1<<20+1) // a string over 1 MiB
	kib200      = strings.Repeat("x", 200<<10) // over what exec takes (128 KiB), under the bodies' caps
	long        = strings.Repeat("a", 5000)    // a 5,000-byte name
	hugeInt     = json.Number("99999999999999999999")
	minInt64    = json.Number("-9223372036854775808")
	hugeNumber  = json.Number("1e308")
	minusNumber = json.Number("-1e308")
)

// bulk are fields whose values may be large (a program, a file's
// content, input for a process): a 1 MiB value is theirs to take or
// refuse, not malformed.
var bulk = map[string]bool{"code": true, "content_base64": true, "stdin": true, "pty": true}

// pathLike are fields that name a path or an id: a 5,000-byte one is
// malformed (the ENAMETOOLONG, 500).
var pathLike = map[string]bool{"path": true, "cwd": true, "from": true, "to": true, "sandbox_id": true,
	"execution_id": true, "session_id": true, "context_id": true, "watcherId": true, "templateID": true,
	"image": true, "language": true, "tag": true}

// mutation is a body with one field made hostile.
type mutation struct {
	name string
	body []byte
	want want
}

// mutations are base with each leaf made hostile in each way that fits
// its kind: the wrong type, integers past int64 and at its minimum, huge
// numbers, strings over 1 MiB (past most bodies' caps) and of 200 KiB
// (under them: each field's own bound), 5,000-byte paths and ids.
func mutations(base []byte, leaves []leaf) []mutation {
	var out []mutation
	add := func(l leaf, how string, v any, w want) {
		var b map[string]any
		d := json.NewDecoder(bytes.NewReader(base))
		d.UseNumber()
		if err := d.Decode(&b); err != nil || b == nil {
			b = map[string]any{}
		}
		out = append(out, mutation{l.name() + ": " + how, marshal(set(b, l.path, v)), w})
	}
	for _, l := range leaves {
		last := l.path[len(l.path)-1]
		switch l.kind {
		case "string":
			add(l, "wrong type", 12345, refused)
			w := refused
			if bulk[last] {
				w = answered
			}
			add(l, "1 MiB string", mib, w)
			add(l, "200 KiB string", kib200, w)
			if pathLike[last] {
				add(l, "5,000-byte string", long, refused)
			}
		case "integer":
			add(l, "wrong type", "x", refused)
			add(l, "past int64", hugeInt, refused)
			add(l, "min int64", minInt64, refused)
		case "number":
			add(l, "wrong type", "x", refused)
			add(l, "1e308", hugeNumber, refused)
			add(l, "-1e308", minusNumber, refused)
		case "boolean":
			add(l, "wrong type", "x", refused)
		case "array":
			add(l, "wrong type", map[string]any{}, refused)
			if l.elem == "string" {
				add(l, "wrong item type", []any{12345}, refused)
				add(l, "1 MiB item", []any{mib}, refused)
				add(l, "200 KiB item", []any{kib200}, refused)
			}
		case "map":
			add(l, "wrong type", []any{}, refused)
			if l.elem == "string" {
				add(l, "wrong value type", map[string]any{"K": 12345}, refused)
				add(l, "1 MiB value", map[string]any{"K": mib}, refused)
				add(l, "200 KiB value", map[string]any{"K": kib200}, refused)
			}
		case "object":
			add(l, "wrong type", []any{}, refused)
		default:
			add(l, "wrong type", []any{[]any{true}}, refused)
		}
	}
	return out
}

// set returns v with the field at path set to x.
func set(v any, path []string, x any) any {
	if len(path) == 0 {
		return x
	}
	if path[0] == "[]" {
		var item any
		if a, ok := v.([]any); ok && len(a) > 0 {
			item = a[0]
		}
		return []any{set(item, path[1:], x)}
	}
	m, ok := v.(map[string]any)
	if !ok {
		m = map[string]any{}
	}
	c := make(map[string]any, len(m)+1)
	for k, e := range m {
		c[k] = e
	}
	c[path[0]] = set(m[path[0]], path[1:], x)
	return c
}

func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// schemaLeaves are the fields of a request body's schema, down three
// levels.
func schemaLeaves(s *openapi3.Schema, path []string) []leaf {
	if s == nil || len(path) > 3 {
		return nil
	}
	var out []leaf
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n].Value
		at := append(append([]string(nil), path...), n)
		out = append(out, schemaLeaf(p, at)...)
	}
	return out
}

func schemaLeaf(p *openapi3.Schema, at []string) []leaf {
	kind := func(s *openapi3.Schema) string {
		if s == nil || s.Type == nil {
			return "any"
		}
		for _, k := range []string{"string", "integer", "number", "boolean", "array", "object"} {
			if s.Type.Includes(k) {
				return k
			}
		}
		return "any"
	}
	k := kind(p)
	switch k {
	case "object":
		if ap := p.AdditionalProperties.Schema; ap != nil && len(p.Properties) == 0 {
			return []leaf{{path: at, kind: "map", elem: kind(ap.Value)}}
		}
		return append([]leaf{{path: at, kind: "object"}}, schemaLeaves(p, at)...)
	case "array":
		l := leaf{path: at, kind: "array"}
		if p.Items != nil {
			l.elem = kind(p.Items.Value)
			if l.elem == "object" {
				return append([]leaf{l}, schemaLeaves(p.Items.Value, append(append([]string(nil), at...), "[]"))...)
			}
		}
		return []leaf{l}
	}
	return []leaf{{path: at, kind: k}}
}

// exampleLeaves are the fields of an example body, by the JSON type of
// their value (maps of strings named as maps: envs, metadata).
func exampleLeaves(example []byte) []leaf {
	var v any
	d := json.NewDecoder(bytes.NewReader(example))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		panic("an example body is not JSON: " + string(example))
	}
	return valueLeaves(v, nil)
}

func valueLeaves(v any, path []string) []leaf {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []leaf
	for _, n := range names {
		at := append(append([]string(nil), path...), n)
		switch x := m[n].(type) {
		case string:
			out = append(out, leaf{path: at, kind: "string"})
		case json.Number:
			k := "number"
			if _, err := x.Int64(); err == nil {
				k = "integer"
			}
			out = append(out, leaf{path: at, kind: k})
		case bool:
			out = append(out, leaf{path: at, kind: "boolean"})
		case []any:
			l := leaf{path: at, kind: "array"}
			if len(x) > 0 {
				if _, ok := x[0].(string); ok {
					l.elem = "string"
				}
			}
			out = append(out, l)
		case map[string]any:
			if mapOfStrings(x) {
				out = append(out, leaf{path: at, kind: "map", elem: "string"})
				continue
			}
			out = append(out, leaf{path: at, kind: "object"})
			out = append(out, valueLeaves(x, at)...)
		}
	}
	return out
}

// mapOfStrings: a map whose keys are free (envs, metadata): an object
// whose values are all strings and whose keys are upper case or short.
func mapOfStrings(m map[string]any) bool {
	if len(m) == 0 {
		return false
	}
	for k, v := range m {
		if _, ok := v.(string); !ok || strings.ToUpper(k) != k {
			return false
		}
	}
	return true
}

// envelope is one message of a Connect stream.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}
