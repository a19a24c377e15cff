//go:build linux

package agent

import (
	"encoding/json"
	"syscall"
)

// handlers answer the host's frames, by type. They run on the goroutine
// that reads the control stream, one frame at a time in the order the host
// sent them: a file sent before a start request is in place when the
// process starts (Client.SendFile relies on it). A handler whose work can
// take long (a reset that pings zygotes, a file streamed back) answers from
// a goroutine of its own.
var handlers = map[byte]func(*Agent, frame){
	msgStart:       (*Agent).onStart,
	msgStdin:       (*Agent).onStdin,
	msgCloseStdin:  (*Agent).onStdin,
	msgSignal:      (*Agent).onSignal,
	msgFileBegin:   (*Agent).onFileBegin,
	msgFileData:    (*Agent).onFileData,
	msgFileEnd:     (*Agent).onFileEnd,
	msgReset:       (*Agent).onReset,
	msgForward:     (*Agent).onForward,
	msgFileRead:    (*Agent).onFileRead,
	msgList:        (*Agent).onList,
	msgRemove:      (*Agent).onRemove,
	msgResize:      (*Agent).onResize,
	msgStat:        (*Agent).onStat,
	msgListDepth:   (*Agent).onListDepth,
	msgMkdir:       (*Agent).onMkdir,
	msgMove:        (*Agent).onMove,
	msgWatch:       (*Agent).onWatch,
	msgUnwatch:     (*Agent).onUnwatch,
	msgDial:        (*Agent).onDial,
	msgTunnelData:  (*Agent).onTunnel,
	msgTunnelEOF:   (*Agent).onTunnel,
	msgTunnelAck:   (*Agent).onTunnel,
	msgTunnelClose: (*Agent).onTunnel,
	msgSuspend:     (*Agent).onSuspend,
	msgResume:      (*Agent).onResume,
}

func (a *Agent) handle(f frame) {
	a.resume.lastID = max(a.resume.lastID, f.id)
	h := handlers[f.typ]
	if h == nil {
		a.fail(f.id, refuse(KindInvalid, "frame type %d: %v", f.typ, ErrProtocol))
		return
	}
	h(a, f)
}

// decode reads a frame's JSON payload into v; on failure it answers the
// request and returns false.
func (a *Agent) decode(f frame, what string, v any) bool {
	if err := json.Unmarshal(f.payload, v); err != nil {
		a.fail(f.id, refuse(KindInvalid, "decode %s: %v", what, err))
		return false
	}
	return true
}

// reply answers a request with msgOK, or with the error.
func (a *Agent) reply(id uint32, err error) {
	if err != nil {
		a.fail(id, err)
		return
	}
	a.send(msgOK, id, nil)
}

func (a *Agent) onStart(f frame) {
	var req StartRequest
	if !a.decode(f, "start", &req) {
		return
	}
	pid, err := a.start(f.id, req)
	if err != nil {
		a.fail(f.id, err)
		return
	}
	if pid != 0 { // otherwise the reply comes when the zygote answers
		a.sendJSON(msgStarted, f.id, startedReply{PID: pid})
	}
}

func (a *Agent) onSignal(f frame) {
	var req signalRequest
	if !a.decode(f, "signal", &req) {
		return
	}
	sig := syscall.Signal(req.Signal)
	if req.All {
		a.killAll(sig, false)
	} else if p := a.byID(f.id); p != nil {
		// The process's group, which includes it when it leads it (as
		// every process the agent starts does): signalled once, not
		// twice (a second SIGINT can land in a handler of the first).
		if syscall.Kill(-p.pid, sig) != nil {
			_ = syscall.Kill(p.pid, sig)
		}
	}
	a.send(msgOK, f.id, nil)
}

func (a *Agent) onFileBegin(f frame) {
	var h fileHeader
	if !a.decode(f, "file header", &h) {
		return
	}
	file, err := a.createFile(h)
	if err != nil {
		a.fail(f.id, err)
		return
	}
	a.files[f.id] = file
}

func (a *Agent) onFileData(f frame) {
	u := a.files[f.id]
	if u == nil {
		return // failed already
	}
	if err := u.write(f.payload); err != nil {
		delete(a.files, f.id)
		a.fail(f.id, err)
	}
}

// onFileEnd places the upload, or drops it when the host abandoned it
// (its payload discardUpload; the host waits for no answer then).
func (a *Agent) onFileEnd(f frame) {
	u := a.files[f.id]
	if u == nil {
		return // failed already
	}
	delete(a.files, f.id)
	if string(f.payload) == discardUpload {
		u.discard()
		return
	}
	if err := u.place(); err != nil {
		a.fail(f.id, err)
		return
	}
	a.send(msgOK, f.id, nil)
}

func (a *Agent) onReset(f frame) {
	var req ResetRequest
	if !a.decode(f, "reset", &req) {
		return
	}
	// Answered from a goroutine: pinging zygotes takes a round trip.
	go func() { a.reply(f.id, a.reset(req)) }()
}

func (a *Agent) onForward(f frame) {
	var req ForwardRequest
	if !a.decode(f, "forward", &req) {
		return
	}
	a.reply(f.id, a.forward(req))
}

// pathFrame decodes a request naming a path the host may read or remove
// (under writableRoots, or /workspace itself when listing; anywhere but
// systemPlaces in a system sandbox, / itself when listing) and who does
// it; on failure it answers the request and returns false.
func (a *Agent) pathFrame(f frame) (pathRequest, identity, bool) {
	var req pathRequest
	if !a.decode(f, "path", &req) {
		return req, identity{}, false
	}
	rootOK := f.typ == msgList && (a.users || req.Path == "/workspace")
	if _, _, err := a.confine(req.Path, rootOK); err != nil {
		a.fail(f.id, err)
		return req, identity{}, false
	}
	user, err := a.resolveUser(req.User)
	if err != nil {
		a.fail(f.id, err)
		return req, identity{}, false
	}
	return req, user, true
}

func (a *Agent) onFileRead(f frame) {
	if req, user, ok := a.pathFrame(f); ok {
		// Streamed from a goroutine: a large file must not stall the
		// control stream's reader.
		go a.readFile(f.id, req.Path, user)
	}
}

// onList lists one directory: a listing to depth 1, streamed (at most
// MaxListEntries entries do not fit in one frame).
func (a *Agent) onList(f frame) {
	if req, _, ok := a.pathFrame(f); ok {
		go a.listDepth(f.id, listRequest{Path: req.Path, Depth: 1, User: req.User})
	}
}

func (a *Agent) onRemove(f frame) {
	if req, user, ok := a.pathFrame(f); ok {
		a.reply(f.id, a.remove(req.Path, user))
	}
}
