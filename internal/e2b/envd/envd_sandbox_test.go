package envd

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/runtime"
	"github.com/corralhq/corral/internal/testenv"
	"github.com/corralhq/corral/sandbox"
)

// TestRealSandboxes: envd's calls on real sandboxes of both tiers: a
// command's output and exit, a terminal, a binary file up and down, a
// watch; a link a program plants to the host's files leads nowhere.
func TestRealSandboxes(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tier := range []runtime.Tier{runtime.TierContainer, runtime.TierGVisor} {
		t.Run(string(tier), func(t *testing.T) {
			e := testenv.Engine(t)
			h := harnessOn(t, e, e.Fleet(), sandbox.Isolation(tier), live.DefaultConfig())
			ctx := t.Context()

			ev := h.run(ctx, &StartRequest{Process: shell(`echo "$(id -u) $PWD"; echo oops >&2; exit 7`), Stdin: ptr(false)})
			// E2B's user and home (a live sandbox's).
			if ev.stdout != "1000 /home/user\n" || ev.stderr != "oops\n" || ev.end == nil || ev.end.ExitCode != 7 {
				t.Errorf("stdout %q stderr %q end %+v", ev.stdout, ev.stderr, ev.end)
			}
			term := h.run(ctx, &StartRequest{Process: shell("stty size; tty"), PTY: &PTY{Size: &PTYSize{Cols: 90, Rows: 20}}})
			if !strings.Contains(term.pty, "20 90") || !strings.Contains(term.pty, "/dev/pts/") {
				t.Errorf("terminal output %q", term.pty)
			}

			watch, err := client[WatchDirRequest, WatchDirResponse](h.base, "/filesystem.Filesystem/WatchDir").CallServerStream(ctx,
				connect.NewRequest(&WatchDirRequest{Path: "/home/user"}))
			if err != nil {
				t.Fatal(err)
			}
			defer watch.Close()
			if !watch.Receive() || watch.Msg().Start == nil {
				t.Fatalf("no start: %v", watch.Err())
			}
			data := []byte{0, 0xff, 'x', '\n', 0x80}
			res := post(t, h.base+"/files?path=blob.bin", "application/octet-stream", data)
			if b, _ := io.ReadAll(res.Body); res.StatusCode != 200 {
				t.Fatalf("upload %d %s", res.StatusCode, b)
			}
			if code, got, _ := h.download(t, "/home/user/blob.bin"); code != 200 || string(got) != string(data) {
				t.Errorf("download %d %q", code, got)
			}
			for watch.Receive() {
				if fe := watch.Msg().Filesystem; fe != nil && fe.Name == "blob.bin" {
					break
				}
			}
			if watch.Err() != nil {
				t.Errorf("watch: %v", watch.Err())
			}

			// A link to the host's (and the sandbox's) /etc/shadow: listed
			// as a link, never read through.
			h.run(ctx, &StartRequest{Process: shell("ln -s /etc/shadow shadow"), Stdin: ptr(false)})
			st, err := client[StatRequest, StatResponse](h.base, "/filesystem.Filesystem/Stat").CallUnary(ctx,
				connect.NewRequest(&StatRequest{Path: "shadow"}))
			if err != nil || st.Msg.Entry.Type != FileSymlink || st.Msg.Entry.SymlinkTarget == nil || *st.Msg.Entry.SymlinkTarget != "/etc/shadow" {
				t.Errorf("Stat of a link = %+v, %v", st, err)
			}
			if code, got, _ := h.download(t, "shadow"); code == http.StatusOK || strings.Contains(string(got), "root:") {
				t.Errorf("a download through a link: %d %q", code, got)
			}
		})
	}
}

// BenchmarkCommandsRun: commands.run("true") through envd (a Start
// stream over HTTP, to its end event) and the same process through the
// session manager alone, on the container tier.
func BenchmarkCommandsRun(b *testing.B) {
	testenv.RequireRoot(b)
	e := testenv.Engine(b)
	h := harnessOn(b, e, e.Fleet(), sandbox.IsolationContainer, live.DefaultConfig())
	ctx := b.Context()
	b.Run("envd", func(b *testing.B) {
		for b.Loop() {
			if ev := h.run(ctx, &StartRequest{Process: shell("true"), Stdin: ptr(false)}); ev.end == nil || ev.end.ExitCode != 0 {
				b.Fatalf("end %+v", ev.end)
			}
		}
	})
	b.Run("session", func(b *testing.B) {
		for b.Loop() {
			sb, err := h.m.Get("t", "box")
			if err != nil {
				b.Fatal(err)
			}
			p, err := sb.Start(ctx, sandbox.StartProcessRequest{Cmd: []string{"/bin/bash", "-l", "-c", "true"}})
			if err != nil {
				b.Fatal(err)
			}
			if info, err := p.Wait(ctx); err != nil || info.Exit == nil || info.Exit.ExitCode != 0 {
				b.Fatalf("%+v, %v", info, err)
			}
		}
	})
}
