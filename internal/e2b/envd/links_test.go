package envd

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
)

// TestLinks: envdLinks on a fake sandbox, whose "outside" is a directory
// of the host.
func TestLinks(t *testing.T) {
	envdLinks(t, newHarness(t), t.TempDir(), false)
}

// envdLinks: no envd file call (/files GET and POST, octet-stream and
// multipart; Filesystem Stat, MakeDir, Move, ListDir, Remove, WatchDir,
// CreateWatcher) goes through a link a program in h's sandbox planted —
// first in the path, in its middle or last; to out (a directory outside
// the user's home the program makes), to /, to /tmp, inside — each answers 400
// or invalid_argument saying so, and nothing outside changes. A link at
// the end is described by Stat and removed as itself. With image, the
// paths through the link to / reach the image (read-only) and the
// sandbox's /tmp: safe only in a real sandbox. Other hostile paths answer
// 4xx too: through a file, names too long.
func envdLinks(t *testing.T, h *harness, out string, image bool) {
	ctx := t.Context()
	plant := "mkdir -p d/e " + out + "/dir && echo x > d/f && echo keep > " + out + "/canary && echo keep > " + out + "/dir/canary && " +
		"ln -s / up && ln -s " + out + " o && ln -s " + out + " d/mid && ln -s e d/in && ln -s " + out + "/canary last && " +
		"ln -s ../../tmp tl && echo keep > ../../tmp/keep"
	if ev := h.run(ctx, &StartRequest{Process: shell(plant), Stdin: ptr(false)}); ev.end == nil || ev.end.ExitCode != 0 {
		t.Fatalf("plant links: %+v %s", ev.end, ev.stderr)
	}
	held := func() string {
		ev := h.run(ctx, &StartRequest{Process: shell("find " + out + " ../../tmp | sort; cat " + out + "/canary " + out + "/dir/canary ../../tmp/keep"), Stdin: ptr(false)})
		return ev.stdout
	}
	before := held()

	refusedHTTP := func(what string, code int, body string) {
		t.Helper()
		if code != http.StatusBadRequest || !strings.Contains(body, "symbolic link") {
			t.Errorf("%s: %d %s, want 400 saying the path passes through a link", what, code, body)
		}
	}
	refused := func(what string, err error, want connect.Code) {
		t.Helper()
		var ce *connect.Error
		if codeOf(err) != want || want == connect.CodeInvalidArgument && (!errors.As(err, &ce) || !strings.Contains(ce.Message(), "symbolic link")) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}
	stat := client[StatRequest, StatResponse](h.base, "/filesystem.Filesystem/Stat")
	mkdir := client[MakeDirRequest, MakeDirResponse](h.base, "/filesystem.Filesystem/MakeDir")
	move := client[MoveRequest, MoveResponse](h.base, "/filesystem.Filesystem/Move")
	list := client[ListDirRequest, ListDirResponse](h.base, "/filesystem.Filesystem/ListDir")
	remove := client[RemoveRequest, RemoveResponse](h.base, "/filesystem.Filesystem/Remove")
	watch := client[WatchDirRequest, WatchDirResponse](h.base, "/filesystem.Filesystem/WatchDir")
	watcher := client[CreateWatcherRequest, CreateWatcherResponse](h.base, "/filesystem.Filesystem/CreateWatcher")
	watchErr := func(p string) error {
		st, err := watch.CallServerStream(ctx, connect.NewRequest(&WatchDirRequest{Path: p}))
		if err != nil {
			return err
		}
		defer st.Close()
		for st.Receive() {
			if st.Msg().Start != nil {
				return nil
			}
		}
		return st.Err()
	}
	// Reads, writes, listings and watches of a path.
	readsAndWrites := func(p string) {
		t.Helper()
		code, body, _ := h.download(t, p)
		refusedHTTP("download "+p, code, string(body))
		res := post(t, h.base+"/files?path="+p, "application/octet-stream", []byte("written"))
		b, _ := io.ReadAll(res.Body)
		refusedHTTP("octet-stream upload "+p, res.StatusCode, string(b))
		code, mb := h.upload(t, p, map[string][]byte{"x": []byte("written")})
		refusedHTTP("multipart upload "+p, code, mb)
		_, err := list.CallUnary(ctx, connect.NewRequest(&ListDirRequest{Path: p, Depth: 2}))
		refused("ListDir "+p, err, connect.CodeInvalidArgument)
		refused("WatchDir "+p, watchErr(p), connect.CodeInvalidArgument)
		_, err = watcher.CallUnary(ctx, connect.NewRequest(&CreateWatcherRequest{Path: p}))
		refused("CreateWatcher "+p, err, connect.CodeInvalidArgument)
	}

	through := []string{"o/canary", "o/new", "o/dir/canary", "up" + out + "/canary", "up" + out + "/new",
		"/home/user/tl/keep", "tl/new", "d/mid/canary", "d/mid/new/x", "d/mid/dir/canary", "d/in/x"}
	if image {
		through = append(through, "up/etc/passwd", "up/tmp/x", "up/tmp/keep", "/home/user/up/etc")
	}
	for _, p := range through {
		readsAndWrites(p)
		_, err := stat.CallUnary(ctx, connect.NewRequest(&StatRequest{Path: p}))
		refused("Stat "+p, err, connect.CodeInvalidArgument)
		_, err = mkdir.CallUnary(ctx, connect.NewRequest(&MakeDirRequest{Path: p + "/sub"}))
		refused("MakeDir "+p, err, connect.CodeInvalidArgument)
		_, err = move.CallUnary(ctx, connect.NewRequest(&MoveRequest{Source: p, Destination: "moved"}))
		refused("Move from "+p, err, connect.CodeInvalidArgument)
		_, err = move.CallUnary(ctx, connect.NewRequest(&MoveRequest{Source: "d/f", Destination: p}))
		refused("Move to "+p, err, connect.CodeInvalidArgument)
		_, err = remove.CallUnary(ctx, connect.NewRequest(&RemoveRequest{Path: p}))
		refused("Remove "+p, err, connect.CodeInvalidArgument)
	}
	for _, p := range []string{"last", "up", "tl", "d/in"} {
		readsAndWrites(p)
		_, err := mkdir.CallUnary(ctx, connect.NewRequest(&MakeDirRequest{Path: p}))
		refused("MakeDir "+p, err, connect.CodeAlreadyExists)
		st, err := stat.CallUnary(ctx, connect.NewRequest(&StatRequest{Path: p}))
		if err != nil || st.Msg.Entry.Type != FileSymlink {
			t.Errorf("Stat %s: %+v %v, want the link", p, st, err)
		}
	}
	if _, err := move.CallUnary(ctx, connect.NewRequest(&MoveRequest{Source: "last", Destination: "d/last"})); err != nil {
		t.Errorf("Move a link: %v", err)
	}
	for _, p := range []string{"d/last", "up", "tl", "o", "d"} {
		if _, err := remove.CallUnary(ctx, connect.NewRequest(&RemoveRequest{Path: p})); err != nil {
			t.Errorf("Remove %s: %v", p, err)
		}
	}
	if after := held(); after != before || !strings.HasSuffix(after, "keep\nkeep\nkeep\n") {
		t.Errorf("outside the user's home:\n%s\nwas\n%s", after, before)
	}
	if ls, err := list.CallUnary(ctx, connect.NewRequest(&ListDirRequest{Path: "/home/user"})); err != nil || len(ls.Msg.Entries) != 0 {
		t.Errorf("/home/user after the links' removal: %+v %v", ls, err)
	}

	// Through a file, names too long: before the agent (over 4,096
	// bytes; a relative path's name over 255) or by it.
	if code, body := h.upload(t, "f", map[string][]byte{"f": []byte("x")}); code != 200 {
		t.Fatalf("upload f: %d %s", code, body)
	}
	name, long := strings.Repeat("n", 300), strings.Repeat("n", 5000)
	for _, p := range []string{"f/x", "/home/user/f/x", name, "/home/user/" + name, long, "/home/user/" + long} {
		code, body, _ := h.download(t, p)
		if code != http.StatusBadRequest {
			t.Errorf("download %.40s: %d %s", p, code, body)
		}
		if code, body := h.upload(t, p, map[string][]byte{"x": []byte("x")}); code != http.StatusBadRequest {
			t.Errorf("upload %.40s: %d %s", p, code, body)
		}
		for what, call := range map[string]func() error{
			"Stat": func() error { _, err := stat.CallUnary(ctx, connect.NewRequest(&StatRequest{Path: p})); return err },
			"MakeDir": func() error {
				_, err := mkdir.CallUnary(ctx, connect.NewRequest(&MakeDirRequest{Path: p + "/y"}))
				return err
			},
			"Move": func() error {
				_, err := move.CallUnary(ctx, connect.NewRequest(&MoveRequest{Source: "f", Destination: p}))
				return err
			},
			"ListDir": func() error { _, err := list.CallUnary(ctx, connect.NewRequest(&ListDirRequest{Path: p})); return err },
			"Remove": func() error {
				_, err := remove.CallUnary(ctx, connect.NewRequest(&RemoveRequest{Path: p + "/y"}))
				return err
			},
			"WatchDir": func() error { return watchErr(p) },
		} {
			if err := call(); codeOf(err) != connect.CodeInvalidArgument {
				t.Errorf("%s %.40s: %v, want invalid_argument", what, p, err)
			}
		}
	}
}
