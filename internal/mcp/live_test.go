package mcp

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/corralhq/corral/sandbox"
	gomcp "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The answer of a cell: stdout, stderr, the main result's text/plain,
// display() results, images as image content and the error, in the text a
// model reads and in the structured result.
func TestCellResult(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nnot really a picture")
	ex := &sandbox.Execution{
		ExecutionCount: 3,
		Stdout:         []string{"loading\n", "done\n"},
		Stderr:         []string{"warning: old\n"},
		Results: []sandbox.CellResult{
			{Data: map[string]string{"text/plain": "<Figure>", "image/png": base64.StdEncoding.EncodeToString(png)}},
			{Data: map[string]string{"text/plain": "   a\n0  1", "text/html": "<table></table>"}},
			{Data: map[string]string{"text/plain": "42"}, IsMain: true},
		},
	}
	res := cellResult(CellOutput{SandboxID: "sb1", ContextID: "c1", Created: []string{"context"}}, ex)
	if res.IsError || len(res.Content) != 2 {
		t.Fatalf("isError %v, %d contents", res.IsError, len(res.Content))
	}
	text := res.Content[0].(*gomcp.TextContent).Text
	for _, want := range []string{
		"sandbox sb1, context c1, cell 3 (a new context: pass its id",
		"stdout:\nloading\ndone\n", "stderr:\nwarning: old\n",
		"display [image/png attached as an image]: <Figure>\n",
		"display [text/html in the structured result]:\n   a\n0  1\n",
		"result: 42\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	img, ok := res.Content[1].(*gomcp.ImageContent)
	if !ok || img.MIMEType != "image/png" || !bytes.Equal(img.Data, png) {
		t.Errorf("image content %+v", res.Content[1])
	}
	out := res.StructuredContent.(CellOutput)
	if out.Stdout != "loading\ndone\n" || out.Stderr != "warning: old\n" || out.ExecutionCount != 3 || len(out.Results) != 3 ||
		out.Results[0].Data["image/png"] != "" || strings.Join(out.Results[0].MIMETypes, ",") != "image/png,text/plain" ||
		out.Results[1].Data["text/html"] != "<table></table>" || !out.Results[2].IsMain || out.Results[2].Data["text/plain"] != "42" {
		t.Errorf("structured %+v", out)
	}

	// An exception: a tool error with its name, value and traceback.
	ex = &sandbox.Execution{ExecutionCount: 4, Error: &sandbox.CellError{Name: "NameError", Value: "name 'x' is not defined",
		Traceback: []string{"Traceback (most recent call last):\n", "  Cell In[4], line 1\n", "NameError: name 'x' is not defined\n"}}}
	res = cellResult(CellOutput{SandboxID: "sb1", ContextID: "c2"}, ex)
	text = res.Content[0].(*gomcp.TextContent).Text
	if !res.IsError || !strings.Contains(text, "error: NameError: name 'x' is not defined\ntraceback:\nTraceback (most recent call last):\n  Cell In[4], line 1\n") ||
		!strings.Contains(text, "keeps its variables") {
		t.Errorf("error: isError %v, text:\n%s", res.IsError, text)
	}
	if e := res.StructuredContent.(CellOutput).Error; e == nil || e.Name != "NameError" || len(e.Traceback) != 3 {
		t.Errorf("structured error %+v", e)
	}

	// A timeout's value says what became of the context; no claim is added.
	ex = &sandbox.Execution{Error: &sandbox.CellError{Name: "TimeoutError", Value: "did not stop; the context was restarted and its state is lost"}}
	if text := cellResult(CellOutput{}, ex).Content[0].(*gomcp.TextContent).Text; strings.Contains(text, "keeps its variables") {
		t.Errorf("timeout: %s", text)
	}

	// Nothing at all still says so.
	text = cellResult(CellOutput{SandboxID: "s", ContextID: "c"}, &sandbox.Execution{ExecutionCount: 1}).Content[0].(*gomcp.TextContent).Text
	if !strings.Contains(text, "(no output and no value)") {
		t.Errorf("silent cell: %q", text)
	}
}

func TestClip(t *testing.T) {
	if s, cut := clip("short", 10); s != "short" || cut {
		t.Errorf("short: %q %v", s, cut)
	}
	long := strings.Repeat("a", 10) + strings.Repeat("é", 10) + strings.Repeat("b", 10)
	s, cut := clip(long, 16)
	if !cut || !strings.HasPrefix(s, "aaaaaaaa\n[… ") || !strings.HasSuffix(s, " bytes cut …]\nbbbbbbbb") {
		t.Errorf("clip: %q %v", s, cut)
	}
	// A cut inside a two-byte character moves to its boundary.
	s, _ = clip(strings.Repeat("é", 20), 9)
	if !strings.HasPrefix(s, "éé\n") || !strings.HasSuffix(s, "\néé") {
		t.Errorf("clip at a boundary: %q", s)
	}
}
