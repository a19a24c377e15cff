package envd

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func (h *harness) upload(t *testing.T, query string, files map[string][]byte) (int, string) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for name, data := range files {
		hdr := textproto.MIMEHeader{}
		hdr.Set("Content-Disposition", `form-data; name="file"; filename="`+name+`"`)
		hdr.Set("Content-Type", "application/octet-stream")
		w, err := mw.CreatePart(hdr)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
	}
	mw.Close()
	res := post(t, h.base+"/files?path="+query, mw.FormDataContentType(), body.Bytes())
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (h *harness) download(t *testing.T, path string) (int, []byte, http.Header) {
	t.Helper()
	res, err := http.Get(h.base + "/files?path=" + path + "&username=user")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

// TestFiles: files.write (multipart, and octet-stream plain and gzip),
// read, list, getInfo, makeDir, rename, remove, exists.
func TestFiles(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	if code, body := h.upload(t, "/workspace/bin.dat", map[string][]byte{"/workspace/bin.dat": binary}); code != 200 ||
		body != `[{"name":"bin.dat","type":"file","path":"/workspace/bin.dat"}]`+"\n" {
		t.Errorf("multipart upload: %d %s", code, body)
	}
	// writeFiles: no path in the query, each part's file name is its path.
	code, body := h.upload(t, "", map[string][]byte{"a/one.txt": []byte("one"), "/tmp/two.txt": []byte("two")})
	var infos []writeInfo
	if code != 200 || json.Unmarshal([]byte(body), &infos) != nil || len(infos) != 2 {
		t.Errorf("two files: %d %s", code, body)
	}
	res := post(t, h.base+"/files?path=raw.txt", "application/octet-stream", []byte("raw bytes"))
	if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 || string(b) != `[{"name":"raw.txt","type":"file","path":"/home/user/raw.txt"}]`+"\n" {
		t.Errorf("octet-stream upload: %d %s", res.StatusCode, b)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	req, _ := http.NewRequestWithContext(ctx, "POST", h.base+"/files?path=z.txt", &gz)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Errorf("gzip upload: %v %v", res, err)
	}
	for path, want := range map[string]string{"/workspace/bin.dat": string(binary), "a/one.txt": "one", "/tmp/two.txt": "two",
		"raw.txt": "raw bytes", "z.txt": "zipped"} {
		if code, got, _ := h.download(t, path); code != 200 || string(got) != want {
			t.Errorf("read %s: %d %q, want %q", path, code, got, want)
		}
	}
	res = post(t, h.base+"/files?path=empty.txt", "application/octet-stream", nil)
	if code, got, hdr := h.download(t, "empty.txt"); res.StatusCode != 200 || code != 200 || len(got) != 0 || hdr.Get("Content-Length") != "0" {
		t.Errorf("empty file: %d %q %v", code, got, hdr)
	}
	// Missing: E2B's 404 body. Refused: metadata (not kept), a bad path.
	if code, got, _ := h.download(t, "nope.txt"); code != 404 || !strings.HasPrefix(string(got), `{"code":404,"message":"`) {
		t.Errorf("missing file: %d %s", code, got)
	}
	if code, got, _ := h.download(t, "/etc/passwd"); code != 400 {
		t.Errorf("a path outside: %d %s", code, got)
	}
	req, _ = http.NewRequestWithContext(ctx, "POST", h.base+"/files?path=m.txt", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("X-Metadata-Owner", "ann")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 400 {
		t.Errorf("metadata: %v %v", res, err)
	}
	if res := post(t, h.base+"/files?path=x", "multipart/form-data; boundary=zz", []byte("--zz\r\ngarbage")); res.StatusCode != 400 {
		t.Errorf("a malformed multipart body: %d", res.StatusCode)
	}
	if res := post(t, h.base+"/files?path=x", "text/plain", []byte("x")); res.StatusCode != 415 {
		t.Errorf("text/plain: %d", res.StatusCode)
	}

	stat := client[StatRequest, StatResponse](h.base, "/filesystem.Filesystem/Stat")
	st, err := stat.CallUnary(ctx, connect.NewRequest(&StatRequest{Path: "raw.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if e := st.Msg.Entry; e.Type != FileFile || e.Size != 9 || e.Path != "/home/user/raw.txt" || e.Permissions != "-rw-r--r--" || e.ModifiedTime == nil ||
		time.Since(e.ModifiedTime.Time) > time.Hour {
		t.Errorf("Stat = %+v", e)
	}
	if _, err := stat.CallUnary(ctx, connect.NewRequest(&StatRequest{Path: "nope"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("Stat of nothing: %v, want not_found", err)
	}
	mk := client[MakeDirRequest, MakeDirResponse](h.base, "/filesystem.Filesystem/MakeDir")
	d, err := mk.CallUnary(ctx, connect.NewRequest(&MakeDirRequest{Path: "x/y/z"}))
	if err != nil || d.Msg.Entry.Type != FileDirectory || d.Msg.Entry.Path != "/home/user/x/y/z" {
		t.Fatalf("MakeDir = %+v, %v", d, err)
	}
	if _, err := mk.CallUnary(ctx, connect.NewRequest(&MakeDirRequest{Path: "x/y/z"})); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("MakeDir of one there: %v, want already_exists", err)
	}
	mv, err := client[MoveRequest, MoveResponse](h.base, "/filesystem.Filesystem/Move").CallUnary(ctx,
		connect.NewRequest(&MoveRequest{Source: "raw.txt", Destination: "x/y/z/moved.txt"}))
	if err != nil || mv.Msg.Entry.Path != "/home/user/x/y/z/moved.txt" || mv.Msg.Entry.Size != 9 {
		t.Errorf("Move = %+v, %v", mv, err)
	}
	ls := client[ListDirRequest, ListDirResponse](h.base, "/filesystem.Filesystem/ListDir")
	l, err := ls.CallUnary(ctx, connect.NewRequest(&ListDirRequest{Path: "x", Depth: 3}))
	var paths []string
	if err == nil {
		for _, e := range l.Msg.Entries {
			paths = append(paths, e.Path)
		}
	}
	if want := "/home/user/x/y /home/user/x/y/z /home/user/x/y/z/moved.txt"; strings.Join(paths, " ") != want {
		t.Errorf("ListDir depth 3 = %v, %v; want %s", paths, err, want)
	}
	if l, err := ls.CallUnary(ctx, connect.NewRequest(&ListDirRequest{Path: "x"})); err != nil || len(l.Msg.Entries) != 1 {
		t.Errorf("ListDir without depth (1) = %+v, %v", l, err)
	}
	if _, err := ls.CallUnary(ctx, connect.NewRequest(&ListDirRequest{Path: "x", Depth: 1000})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListDir too deep: %v", err)
	}
	rm := client[RemoveRequest, RemoveResponse](h.base, "/filesystem.Filesystem/Remove")
	if _, err := rm.CallUnary(ctx, connect.NewRequest(&RemoveRequest{Path: "x"})); err != nil {
		t.Fatal(err)
	}
	if _, err := stat.CallUnary(ctx, connect.NewRequest(&StatRequest{Path: "x/y"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("Stat after Remove: %v", err)
	}
	if _, err := stat.CallUnary(ctx, connect.NewRequest(&StatRequest{Path: "/proc/1/environ"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Stat in /proc: %v", err)
	}
	if strings.Contains(h.logs.String(), "level=ERROR") {
		t.Errorf("errors logged: %s", h.logs)
	}
}

// TestWatchDir: a stream's events for a file written, with its entry;
// the stream ends when its directory goes.
func TestWatchDir(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	if _, err := client[MakeDirRequest, MakeDirResponse](h.base, "/filesystem.Filesystem/MakeDir").CallUnary(ctx,
		connect.NewRequest(&MakeDirRequest{Path: "w"})); err != nil {
		t.Fatal(err)
	}
	st, err := client[WatchDirRequest, WatchDirResponse](h.base, "/filesystem.Filesystem/WatchDir").CallServerStream(ctx,
		connect.NewRequest(&WatchDirRequest{Path: "/home/user/w", Recursive: true, IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !st.Receive() || st.Msg().Start == nil {
		t.Fatalf("first message %+v, %v; want start", st.Msg(), st.Err())
	}
	if code, body := h.upload(t, "/home/user/w/new.txt", map[string][]byte{"new.txt": []byte("hello")}); code != 200 {
		t.Fatalf("upload %d %s", code, body)
	}
	var seen *FilesystemEvent
	for seen == nil && st.Receive() {
		if fe := st.Msg().Filesystem; fe != nil && fe.Name == "new.txt" && fe.Entry != nil {
			seen = fe
		}
	}
	if seen == nil || (seen.Type != EventCreate && seen.Type != EventWrite) || seen.Entry.Path != "/home/user/w/new.txt" {
		t.Fatalf("event %+v, %v", seen, st.Err())
	}
	if _, err := client[RemoveRequest, RemoveResponse](h.base, "/filesystem.Filesystem/Remove").CallUnary(ctx,
		connect.NewRequest(&RemoveRequest{Path: "w"})); err != nil {
		t.Fatal(err)
	}
	for st.Receive() {
	}
	if st.Err() != nil {
		t.Errorf("the stream of a removed directory: %v, want its end", st.Err())
	}
}

// TestWatcherPolling: CreateWatcher, GetWatcherEvents, RemoveWatcher;
// another tenant cannot read a watcher.
func TestWatcherPolling(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	cw, err := client[CreateWatcherRequest, CreateWatcherResponse](h.base, "/filesystem.Filesystem/CreateWatcher").CallUnary(ctx,
		connect.NewRequest(&CreateWatcherRequest{Path: "/tmp"}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.WatcherID
	get := client[GetWatcherEventsRequest, GetWatcherEventsResponse](h.base, "/filesystem.Filesystem/GetWatcherEvents")
	if code, body := h.upload(t, "/tmp/polled.txt", map[string][]byte{"x": []byte("x")}); code != 200 {
		t.Fatalf("upload %d %s", code, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	found := false
	for !found && time.Now().Before(deadline) {
		res, err := get.CallUnary(ctx, connect.NewRequest(&GetWatcherEventsRequest{WatcherID: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range res.Msg.Events {
			found = found || ev.Name == "polled.txt"
		}
		if !found {
			time.Sleep(10 * time.Millisecond) // polling is how this API is used
		}
	}
	if !found {
		t.Fatal("no event for polled.txt in 30 s")
	}
	otherGet := client[GetWatcherEventsRequest, GetWatcherEventsResponse](h.other, "/filesystem.Filesystem/GetWatcherEvents")
	if _, err := otherGet.CallUnary(ctx, connect.NewRequest(&GetWatcherEventsRequest{WatcherID: id})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("another tenant's poll: %v, want not_found", err)
	}
	rmw := client[RemoveWatcherRequest, RemoveWatcherResponse](h.base, "/filesystem.Filesystem/RemoveWatcher")
	if _, err := rmw.CallUnary(ctx, connect.NewRequest(&RemoveWatcherRequest{WatcherID: id})); err != nil {
		t.Fatal(err)
	}
	if _, err := get.CallUnary(ctx, connect.NewRequest(&GetWatcherEventsRequest{WatcherID: id})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("poll of a removed watcher: %v, want not_found", err)
	}
	h.svc.mu.Lock()
	n := len(h.svc.watchers)
	h.svc.mu.Unlock()
	if n != 0 {
		t.Errorf("%d watchers left", n)
	}
}
