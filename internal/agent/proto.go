// Package agent is Corral's process inside every sandbox (PID 1) and the
// host's client for it: start processes, stream their output, report how
// they ended, reap and kill what they leave behind, place files.
package agent

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Protocol. The host and the agent exchange frames over one bidirectional
// stream (a pair of pipes or a unix socket). A frame is a 9-byte header —
// type (1 byte), id (4 bytes, big endian), payload length (4 bytes, big
// endian) — followed by the payload. The id names the request or process a
// frame belongs to; the host chooses it. Control payloads are JSON; output and
// file data are raw bytes.
//
// The host treats everything the agent sends as untrusted input: lengths are
// capped and unknown ids are ignored.

// Version is bumped when the protocol changes incompatibly. The agent and
// the host ship together (the agent is bound into each sandbox from the
// host's own installation), so the host speaks one version only. 2: error
// frames carry a Kind. 3: listings stream as lines of JSON in msgFileData
// frames; terminals, stat, mkdir, move and watches. 4: stdin flow control
// (msgStdinAck, msgStdinEnd). 5: tunnels to the sandbox's TCP ports
// (msgDial, tunnel.go). 6: users (StartRequest.User, the user of file
// requests, Hello.Users).
const Version = 6

// MaxPayload caps one frame's payload in either direction.
const MaxPayload = 1 << 20

const headerSize = 9

// Frame types sent by the host.
const (
	msgStart      byte = 1  // JSON StartRequest; answered by msgStarted or msgError
	msgStdin      byte = 2  // raw bytes for the process's stdin, within StdinWindow (client_stdin.go)
	msgCloseStdin byte = 3  // close the process's stdin, after the data before it
	msgSignal     byte = 4  // JSON signalRequest
	msgFileBegin  byte = 5  // JSON fileHeader; data follows in msgFileData
	msgFileData   byte = 6  // raw bytes
	msgFileEnd    byte = 7  // end of file; answered by msgOK or msgError
	msgReset      byte = 8  // JSON ResetRequest; answered by msgOK or msgError
	msgFileRead   byte = 9  // JSON pathRequest; answered by msgFileData frames then msgOK, or msgError
	msgList       byte = 10 // JSON pathRequest; answered like msgListDepth
	msgRemove     byte = 11 // JSON pathRequest; answered by msgOK or msgError
	msgForward    byte = 12 // JSON ForwardRequest; answered by msgOK or msgError
	msgResize     byte = 13 // JSON PTYSize, under a process's id; answered by msgOK or msgError
	msgStat       byte = 14 // JSON pathRequest; answered by msgOK with JSON Entry, or msgError
	// msgListDepth: JSON listRequest; answered by msgFileData frames holding
	// one JSON Entry per line (a frame ends at a line's end), then msgOK; or
	// msgError.
	msgListDepth byte = 15
	msgMkdir     byte = 16 // JSON mkdirRequest; answered by msgOK or msgError
	msgMove      byte = 17 // JSON moveRequest; answered by msgOK or msgError
	// msgWatch: JSON watchRequest; answered by msgOK once the directory is
	// watched (or msgError), then msgWatchEvents frames under the same id
	// until msgWatchEnd.
	msgWatch   byte = 18
	msgUnwatch byte = 19 // under a watch's id: stop it; answered by msgWatchEnd
	// msgDial: JSON dialRequest; answered by msgOK once connected to the
	// port, or msgError; then the tunnel's frames below, under its id
	// (tunnel.go).
	msgDial        byte = 40
	msgTunnelData  byte = 41 // raw bytes for the port, within TunnelWindow
	msgTunnelEOF   byte = 42 // half-close the connection, after the data before it
	msgTunnelAck   byte = 43 // JSON stdinAck: the host took that many more bytes of msgTunnelOut
	msgTunnelClose byte = 44 // end the tunnel at once; nothing more comes for it
	msgSuspend     byte = 28 // the agent stops sending (resume.go); answered by msgOK
	msgResume      byte = 29 // id 0; the agent sends again; answered by msgHello with Resume
)

// Frame types sent by the agent.
const (
	msgHello   byte = 64 // JSON Hello, first (again, with Resume, to msgResume)
	msgStarted byte = 65 // JSON startedReply
	msgStdout  byte = 66 // raw bytes
	msgStderr  byte = 67 // raw bytes
	msgStatus  byte = 68 // raw bytes the runner wrote to its status fd
	msgExit    byte = 69 // JSON ExitStatus; last frame for a process
	msgError   byte = 70 // JSON errorReply (errors.go): a Kind and a message; the request failed
	msgOK      byte = 71 // the request succeeded
	// msgWatchEvents: JSON []WatchEvent, under a watch's id.
	msgWatchEvents byte = 72
	// msgWatchEnd: JSON errorReply, under a watch's id: its last frame. An
	// empty kind: the host stopped it; else why the agent ended it.
	msgWatchEnd byte = 73
	// msgStdinAck: JSON stdinAck, under a process's id: its stdin took
	// that many more bytes of msgStdin payloads (stdin.go).
	msgStdinAck byte = 80
	// msgStdinEnd: JSON errorReply, under a process's id: its stdin takes
	// nothing more (the process closed it, or has none, or the host sent
	// past the window); what was not acknowledged is dropped.
	msgStdinEnd byte = 81
	// Under a tunnel's id (tunnel.go): msgTunnelOut, raw bytes from the
	// port, within TunnelWindow; msgTunnelOutEOF, the port's side
	// half-closed; msgTunnelTook, JSON stdinAck, the port took that many
	// more bytes of msgTunnelData; msgTunnelEnd, JSON errorReply, the
	// tunnel's last frame (an empty kind: both directions done).
	msgTunnelOut    byte = 90
	msgTunnelOutEOF byte = 91
	msgTunnelTook   byte = 92
	msgTunnelEnd    byte = 93
)

// ErrProtocol reports a malformed frame.
var ErrProtocol = errors.New("agent protocol error")

// Hello is the agent's first frame.
type Hello struct {
	Version int `json:"version"`
	PID     int `json:"pid"`
	UID     int `json:"uid"`
	// Users: the agent is a system sandbox's (it runs as the sandbox's
	// root, UID 0): it runs processes and file operations as the user a
	// request names (StartRequest.User, AsUser), by default the one of
	// DefaultUID, and places files anywhere but under /proc, /sys, /dev and
	// /.corral. Otherwise every request runs as UID, files go under
	// /workspace and /tmp only, and naming another user is refused.
	Users bool `json:"users,omitempty"`
	// Resume is set in the hello that answers msgResume (resume.go).
	Resume *ResumeState `json:"resume,omitempty"`
}

// StartRequest asks the agent to start a process.
type StartRequest struct {
	Argv []string `json:"argv"`
	// Env is passed as is, in this order; the caller sorts it.
	Env []string `json:"env"`
	Dir string   `json:"dir"`
	// Stdin, when true, connects the process's stdin to msgStdin frames;
	// otherwise it reads /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// StatusFD, when true, opens fd 3 as a pipe whose bytes come back as
	// msgStatus frames. Runners use it to report facts (a compile error) that
	// an exit code cannot carry.
	StatusFD bool `json:"status_fd,omitempty"`
	// Persistent processes survive the reaping that ends other processes.
	Persistent bool `json:"persistent,omitempty"`
	// Zygote starts the process as a zygote: a persistent, pre-started
	// interpreter that gets a control socket on fd 3 and forks a child per
	// execution (see the zygote protocol below). The agent answers once
	// the zygote reports it is ready.
	Zygote bool `json:"zygote,omitempty"`
	// Via, when set, runs the process as a child of the zygote the host
	// started under this id: the zygote forks and the child runs Argv its
	// way (for python, Argv is the script and its arguments). With Zygote
	// too, the child is a zygote itself (zygote_via.go) and may have a
	// status fd.
	Via uint32 `json:"via,omitempty"`
	// PTY, when set, runs the process on a new pseudo-terminal of this
	// size: its stdin, stdout and stderr are the terminal, and it leads a
	// session of its own with the terminal as its controlling tty. Its
	// output (echo included) comes as stdout; stdin frames are typed at
	// the terminal, msgCloseStdin types the terminal's end-of-file
	// character (^D), and msgResize changes the size (the process gets
	// SIGWINCH). Stdin is implied; Zygote and Via are refused with it.
	PTY *PTYSize `json:"pty,omitempty"`
	// User names a user of the sandbox's /etc/passwd to run the process
	// as (its uid, gid, groups of /etc/group); "" is the default user (see
	// Hello.Users). HOME, USER and LOGNAME that Env lacks come from its
	// entry when a user is named or the agent runs as root. A child of a
	// zygote (Via) runs as the zygote's user; naming another is refused.
	User string `json:"user,omitempty"`
}

// PTYSize is a terminal's size in characters. Zero means the usual 80×24.
type PTYSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

type startedReply struct {
	PID int `json:"pid"`
	// Ready is what a zygote reported when it became ready.
	Ready json.RawMessage `json:"ready,omitempty"`
}

// The zygote protocol. The agent and a zygote talk over a SOCK_SEQPACKET
// unix socket (fd 3 in the zygote), one JSON message per packet:
//
//	zygote → agent  {"ready": {...}}                 once, after preloading
//	agent → zygote  {"id": n, "argv": [...], "env": [...], "dir": "...",
//	                 "status_fd": bool}              with SCM_RIGHTS fds:
//	                                                 stdin, stdout, stderr
//	                                                 [, status]
//	zygote → agent  {"id": n, "pid": p}              the child runs
//	zygote → agent  {"id": n, "error": "..."}        or it could not fork
//	agent → zygote  {"ping": n}  /  zygote → agent  {"pong": n}
//	zygote → agent  {"spare": p}                     a child forked ahead,
//	                                                 with SCM_RIGHTS: the
//	                                                 socket it waits on
//
// A zygote may fork a child ahead of the next request (a spare, made when
// it starts and at each ping, i.e. after each pooled sandbox's reset) and
// hand the agent the spare's socket. The agent sends the next request
// (the same message and fds as to the zygote) to the spare directly, and
// knows its pid: no fork and no zygote on the way. The agent spares a
// spare from killAll until it serves a request; a newer spare replaces an
// unused one, whose socket the agent closes (it exits). Without a spare
// the request goes to the zygote, which forks.
//
// A child (a spare, or one forked for a request) is the zygote's own where
// the kernel has pidfds (Linux 5.3): the zygote waits on its pidfd beside
// the control socket, reaps it and says
//
//	zygote → agent  {"exited": p, "status": s}       p ended; s is its wait
//	                                                 status (waitpid's)
//
// which the agent takes as its own reaper's (exitedLocked). One fork per
// child: forking was measured as the biggest part of a pooled execution's
// CPU on the VMs Corral runs on (docs/pool.md). Where there are no pidfds
// (an older kernel), the zygote forks each child through a short-lived
// intermediate that exits at once, so the child's parent is the agent (the
// sandbox's init; a subreaper in local mode), which reaps it. Either way the
// agent reports the child's exit like any process's; a program that kills
// the zygote leaves its processes to the agent, which reaps them then. The
// child makes the fds its stdin, stdout, stderr (and fd 3), closes
// everything else (the control socket included), restores the signal
// dispositions of a fresh interpreter, starts a new session, enters dir with
// env and runs argv. A spare is forked the same way.
type zygoteMsg struct {
	ID       uint32          `json:"id,omitempty"`
	Argv     []string        `json:"argv,omitempty"`
	Env      []string        `json:"env,omitempty"`
	Dir      string          `json:"dir,omitempty"`
	StatusFD bool            `json:"status_fd,omitempty"`
	PID      int             `json:"pid,omitempty"`
	Ping     uint32          `json:"ping,omitempty"`
	Pong     uint32          `json:"pong,omitempty"`
	Ready    json.RawMessage `json:"ready,omitempty"`
	Spare    int             `json:"spare,omitempty"`
	Error    string          `json:"error,omitempty"`
	// Exited and Status: a child the zygote forked itself ended, with
	// this wait status (waitpid's).
	Exited int `json:"exited,omitempty"`
	Status int `json:"status,omitempty"`
	// Reaps, with Ready: the zygote reaps its children itself (it has
	// pidfds), so it must not stay stopped (Agent.stopped).
	Reaps bool `json:"reaps,omitempty"`
	// Zygote: the request's last fd is the child's control socket; the
	// child is a zygote (zygote_via.go).
	Zygote bool `json:"zygote,omitempty"`
}

// ExitStatus is how a process ended.
type ExitStatus struct {
	// Code is the exit status, or -1 when a signal killed the process.
	Code int `json:"code"`
	// Signal is the number of the signal that killed the process, or 0.
	Signal int `json:"signal,omitempty"`
	// Reaped counts other processes the agent killed when this one ended.
	Reaped int `json:"reaped,omitempty"`
}

type signalRequest struct {
	Signal int `json:"signal"`
	// All signals every process but the agent and persistent ones.
	All bool `json:"all,omitempty"`
}

type fileHeader struct {
	Path string `json:"path"`
	Mode uint32 `json:"mode"`
	// User (in every file request) is who does the operation, as
	// StartRequest.User.
	User string `json:"user,omitempty"`
}

// ResetRequest returns a sandbox to a clean state between executions.
type ResetRequest struct {
	// Clear lists directories whose contents are removed.
	Clear []string `json:"clear"`
	// IPC removes every System V shared memory segment, semaphore set and
	// message queue of the sandbox.
	IPC bool `json:"ipc,omitempty"`
	// Zygotes lists zygotes (by their start request's id) that must be
	// alive and answer; a reset that finds one dead or mute fails.
	Zygotes []uint32 `json:"zygotes,omitempty"`
	// CPU, if set, is the CPU Zygotes keep to from this reset on (their
	// next spare is forked there), where it is one of the sandbox's: the
	// pool's placement (docs/pool.md, "Executions one after another on one
	// CPU"). A CPU the sandbox does not have is left alone.
	CPU *int `json:"cpu,omitempty"`
}

// ForwardRequest makes the agent accept TCP connections on Listen (inside
// the sandbox's network namespace) and relay each to the unix socket
// Socket (the host's egress proxy, bound into the sandbox).
type ForwardRequest struct {
	Listen string `json:"listen"`
	Socket string `json:"socket"`
}

type pathRequest struct {
	Path string `json:"path"`
	User string `json:"user,omitempty"`
}

// Entry is a file or directory listed by List or ListDepth, or described by
// Stat. A symbolic link is described, never followed.
type Entry struct {
	Name string `json:"name"`
	// Path is the entry's absolute path in the sandbox.
	Path    string    `json:"path"`
	Dir     bool      `json:"dir,omitempty"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	// Type is "file", "dir", "symlink" or "other".
	Type string `json:"type"`
	// SymlinkTarget is what a symbolic link holds, as it holds it.
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

// MaxListEntries caps one List or ListDepth answer: a listing cut there
// holds exactly MaxListEntries entries.
const MaxListEntries = 10000

// MaxListDepth is the deepest ListDepth goes.
const MaxListDepth = 64

type listRequest struct {
	Path  string `json:"path"`
	Depth int    `json:"depth"`
	User  string `json:"user,omitempty"`
}

type mkdirRequest struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
	User    string `json:"user,omitempty"`
}

type moveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
	User string `json:"user,omitempty"`
}

type watchRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive,omitempty"`
	User      string `json:"user,omitempty"`
}

// WatchEvent is a change in a watched directory. Path is absolute, in the
// sandbox. For a rename, the old path comes as OpRename and the new one as
// OpCreate; a directory's own events come from its parent, but for the
// watched directory's OpChmod.
type WatchEvent struct {
	Path string `json:"path"`
	Op   string `json:"op"`
}

// WatchEvent ops. The first five are changes; the last two describe the
// watch itself and name its directory.
const (
	OpCreate = "create"
	OpWrite  = "write"
	OpRemove = "remove"
	OpRename = "rename"
	OpChmod  = "chmod"
	// OpOverflow: events were lost (a queue filled), or some directories
	// could not be watched (past a cap); a caller that must know the
	// directory's state lists it again.
	OpOverflow = "overflow"
	// OpEnd: the watch ended by itself (its directory was removed or moved,
	// or the sandbox is gone); nothing follows. stop says why.
	OpEnd = "end"
)

type frame struct {
	typ     byte
	id      uint32
	payload []byte
}

func writeFrame(w io.Writer, typ byte, id uint32, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("frame of %d bytes: %w", len(payload), ErrProtocol)
	}
	var hdr [headerSize]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:5], id)
	binary.BigEndian.PutUint32(hdr[5:9], uint32(len(payload)))
	// One write per frame keeps frames whole when several goroutines share w
	// under a lock; pipes make writes of up to PIPE_BUF atomic only, so
	// callers serialise.
	buf := make([]byte, 0, headerSize+len(payload))
	buf = append(buf, hdr[:]...)
	buf = append(buf, payload...)
	_, err := w.Write(buf)
	return err
}

// readFrame reads one frame. buf is reused when it is large enough.
func readFrame(r io.Reader, buf []byte) (frame, []byte, error) {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[5:9])
	if n > MaxPayload {
		return frame{}, buf, fmt.Errorf("frame of %d bytes: %w", n, ErrProtocol)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return frame{}, buf, err
	}
	return frame{typ: hdr[0], id: binary.BigEndian.Uint32(hdr[1:5]), payload: buf}, buf, nil
}
