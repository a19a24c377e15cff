package api

import (
	"maps"
	"net/http/httptest"
	"testing"
)

// TestMetadataFilter: both forms of the filter, together; a pair without
// "=" is refused.
func TestMetadataFilter(t *testing.T) {
	for _, c := range []struct {
		query string
		want  map[string]string
		bad   bool
	}{
		{"", map[string]string{}, false},
		{"metadata.a=1&metadata.b=two%20words", map[string]string{"a": "1", "b": "two words"}, false},
		{"metadata=a%3D1%26b%3D2&metadata.c=3", map[string]string{"a": "1", "b": "2", "c": "3"}, false},
		{"metadata=a%3D", map[string]string{"a": ""}, false},
		{"metadata=novalue", nil, true},
		{"metadata=%3Dv", nil, true},
		{"other=x", map[string]string{}, false},
	} {
		got, e := metadataFilter(httptest.NewRequest("GET", "/v1/sandboxes?"+c.query, nil))
		if (e != nil) != c.bad || (!c.bad && !maps.Equal(got, c.want)) {
			t.Errorf("%q: %v, %v; want %v (refused %v)", c.query, got, e, c.want, c.bad)
		}
	}
}
