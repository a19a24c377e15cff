package sandbox

import "time"

// A live sandbox is a session whose sandbox is held for its whole life:
// processes started in it run on between calls, files stay, executions
// that name it (ExecuteRequest.SessionID) run inside it. These are the wire
// types of /v1/sandboxes.

// SandboxLimits bound a whole live sandbox: every process, execution and
// code context in it together. Zero fields take the server's defaults.
type SandboxLimits struct {
	MemoryMB int64   `json:"memory_mb,omitempty"`
	CPUCores float64 `json:"cpu_cores,omitempty"`
	// CPUs is CPUCores's old name, accepted for one release (a request
	// that gives both gives the same number in both) and answered beside
	// it.
	//
	// Deprecated: use CPUCores.
	CPUs float64 `json:"cpus,omitempty"`
	// Pids caps the processes and threads of the sandbox.
	Pids   int64 `json:"pids,omitempty"`
	DiskMB int64 `json:"disk_mb,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	// SandboxID is optional and client-chosen (the rules of an execution
	// id); the server makes one otherwise.
	SandboxID string `json:"sandbox_id,omitempty"`
	// Language picks the image (its default one) and the caches; bash if
	// empty.
	Language string `json:"language,omitempty"`
	// Image names the image instead of the language's default.
	Image  string            `json:"image,omitempty"`
	Limits SandboxLimits     `json:"limits,omitzero"`
	Env    map[string]string `json:"env,omitempty"`
	// Network opens egress to the listed domains for everything that runs
	// in the sandbox; without it there is none.
	Network *Network `json:"network,omitempty"`
	// Tier is container, gvisor or auto (the server routes by risk).
	Tier Tier `json:"tier,omitempty"`
	// TimeoutSeconds is how long the sandbox lives from now (default: the
	// server's, 5 minutes); it does not slide with use. SetTimeout changes it.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
	// Metadata are the client's labels, listed and filtered on (at most 32
	// pairs, 4 KiB in all).
	Metadata map[string]string `json:"metadata,omitempty"`
	// PublicPorts serves the sandbox's ports through E2B's forms
	// (E2b-Sandbox-Port, {port}-{id}.{domain}) without its access token:
	// anyone with the URL reaches them. /v1's ports route always takes
	// the API key.
	PublicPorts bool `json:"public_ports,omitempty"`
	// Lifecycle says what happens at the timeout (killed, or paused) and
	// whether a paused sandbox wakes on its next call; nil: killed.
	Lifecycle *SandboxLifecycle `json:"lifecycle,omitempty"`
	// SnapshotID makes the sandbox from a snapshot (Snapshot.SnapshotID,
	// or its name): with its files and, when the snapshot kept its memory
	// (gVisor), its processes and code contexts with their variables. Its
	// language, image, tier, limits and network are the snapshot's (give
	// them empty or equal); env adds to the snapshot's for new processes.
	SnapshotID string `json:"snapshot_id,omitempty"`
}

// SandboxLifecycle is what happens to a live sandbox at its timeout, and
// after a pause (E2B's lifecycle).
type SandboxLifecycle struct {
	// OnTimeout is "kill" (the default: the sandbox and its files go) or
	// "pause" (it is paused, kept for the server's paused TTL, and resumed
	// by its next call or a resume).
	OnTimeout string `json:"on_timeout,omitempty"`
	// KeepMemory: a pause at the timeout saves the sandbox's memory where
	// its tier can (gVisor); false keeps its files only. Default true.
	KeepMemory *bool `json:"keep_memory,omitempty"`
	// AutoResume: a sandbox a client paused resumes on its next call
	// that needs it running too, as one the server paused (at its timeout
	// or idle) always does; without it such a call is 409 sandbox_paused.
	AutoResume bool `json:"auto_resume,omitempty"`
}

// Reasons of a pause (SandboxPause.Reason).
const (
	PauseClient  = "client"
	PauseTimeout = "timeout"
	PauseIdle    = "idle"
	// PauseDrain: its node was drained (SIGTERM) and handed it off.
	PauseDrain = "drain"
)

// Info describes a live sandbox (GET /v1/sandboxes/{id}; the OpenAPI
// schema SandboxInfo).
type Info struct {
	SandboxID string            `json:"sandbox_id"`
	Language  string            `json:"language"`
	Image     string            `json:"image"`
	Tier      string            `json:"tier"`
	Limits    SandboxLimits     `json:"limits"`
	Network   *Network          `json:"network,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	// State is "running", "starting" while the sandbox is (re)made, or
	// "paused" (Sandbox.Pause).
	State          string    `json:"state"`
	TimeoutSeconds int64     `json:"timeout_seconds"`
	CreatedAt      time.Time `json:"created_at"`
	ExpiresAt      time.Time `json:"expires_at"`
	// Executions counts the executions run in the sandbox.
	Executions int64 `json:"executions"`
	// Restarts counts the times the sandbox died and was made again on
	// the same disk (its processes were lost then).
	Restarts int64 `json:"restarts"`
	// Pause describes the pause of a paused sandbox.
	Pause *SandboxPause `json:"pause,omitempty"`
	// PublicPorts: its ports are served without its access token
	// (CreateSandboxRequest.PublicPorts).
	PublicPorts bool `json:"public_ports,omitempty"`
	// Resume says what the resume kept, in the answer of Sandbox.Resume,
	// and of a create from a snapshot (CreateSandboxRequest.SnapshotID).
	Resume *SandboxResume `json:"resume,omitempty"`
	// Lifecycle is the sandbox's lifecycle (CreateSandboxRequest.Lifecycle),
	// its defaults filled in.
	Lifecycle *SandboxLifecycle `json:"lifecycle,omitempty"`
}

// SandboxInfo is Info's old name, kept for one release.
//
// Deprecated: use Info.
type SandboxInfo = Info

// SandboxPause describes a paused sandbox. While paused its timeout does
// not run (ExpiresAt is then when the server drops it if it is never
// resumed); a resume gives it its whole timeout again.
type SandboxPause struct {
	PausedAt time.Time `json:"paused_at"`
	// Memory: the sandbox was saved with its memory (gVisor): its
	// processes and code contexts go on after the resume. Without it only
	// its files are kept (runc).
	Memory bool `json:"memory"`
	// ImageBytes is the size of the saved memory and state; DurationMS
	// how long the pause took.
	ImageBytes int64 `json:"image_bytes,omitempty"`
	DurationMS int64 `json:"duration_ms"`
	// Reason is why it was paused: "client" (a pause call), "timeout"
	// (its lifecycle pauses it at its timeout) or "idle" (nobody called it
	// for the server's pause_after_idle). A sandbox the server paused
	// resumes on its next call that needs it running.
	Reason string `json:"reason,omitempty"`
	// SnapshotID names the snapshot the paused sandbox is kept as in the
	// server's snapshot store, when it keeps them: any node of the
	// cluster can resume it from there.
	SnapshotID string `json:"snapshot_id,omitempty"`
}

// SandboxResume says what a resume kept.
type SandboxResume struct {
	// Memory: the sandbox went on from its saved memory: its processes
	// run on and its code contexts keep their variables. Without it only
	// its files were kept: its processes and contexts were lost.
	Memory bool `json:"memory"`
	// Processes counts the processes that run on after the resume,
	// ProcessesLost those that ended with the pause, Contexts the code
	// contexts that kept their state.
	Processes     int `json:"processes"`
	ProcessesLost int `json:"processes_lost"`
	Contexts      int `json:"contexts"`
	// DurationMS is how long the resume took.
	DurationMS int64 `json:"duration_ms"`
}

// SandboxMetric is one reading of what a live sandbox uses (GET
// /v1/sandboxes/{id}/metrics), as its host sees it: on gVisor the
// sandbox's kernel (the Sentry) is part of it.
type SandboxMetric struct {
	Timestamp time.Time `json:"timestamp"`
	// CPUCores is the CPU the sandbox may use; CPUUsedPct is how much of
	// it the sandbox used since the reading before, 0 to 100.
	CPUCores   float64 `json:"cpu_cores"`
	CPUUsedPct float64 `json:"cpu_used_pct"`
	// MemoryUsedBytes is the memory the sandbox holds (its programs',
	// shared memory and tmpfs), MemoryCacheBytes the page cache the kernel
	// may take back, MemoryLimitBytes its limit.
	MemoryUsedBytes  int64 `json:"memory_used_bytes"`
	MemoryCacheBytes int64 `json:"memory_cache_bytes"`
	MemoryLimitBytes int64 `json:"memory_limit_bytes"`
	// DiskUsedBytes is what its disk (/workspace, /tmp and whatever else
	// it writes) holds, its file system's own metadata included, of
	// DiskLimitBytes.
	DiskUsedBytes  int64 `json:"disk_used_bytes"`
	DiskLimitBytes int64 `json:"disk_limit_bytes"`
}

// SandboxMetrics is the answer of GET /v1/sandboxes/{id}/metrics: the
// readings asked for, oldest first.
type SandboxMetrics struct {
	Metrics []SandboxMetric `json:"metrics"`
}

// SandboxList is the answer of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Info `json:"sandboxes"`
}

// PTYSize is a terminal's size.
type PTYSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// StartProcessRequest is the body of POST /v1/sandboxes/{id}/processes.
// Exactly one of Cmd and Shell is set.
type StartProcessRequest struct {
	// Cmd is the argv, looked up in PATH.
	Cmd []string `json:"cmd,omitempty"`
	// Shell is a command line, run as /bin/bash -l -c Shell.
	Shell string `json:"shell,omitempty"`
	// Cwd is the working directory (default /workspace).
	Cwd string `json:"cwd,omitempty"`
	// User runs the process as this user of the sandbox: the sandbox
	// user "user" (uid 1000, home /home/user) by default, "root" for
	// root inside the sandbox, or any user root has added.
	User string            `json:"user,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	// Stdin keeps the process's stdin open for WriteStdin; otherwise it
	// reads nothing.
	Stdin bool `json:"stdin,omitempty"`
	// Tag is the client's name for the process, listed with it.
	Tag string `json:"tag,omitempty"`
	// PTY runs the process on a terminal of this size: its stdin, stdout
	// and stderr are the terminal (output comes as stdout, echo included;
	// stdin is implied, and closing it types ^D). TERM defaults to
	// xterm-256color.
	PTY *PTYSize `json:"pty,omitempty"`
}

// ProcessInfo describes a process of a live sandbox.
type ProcessInfo struct {
	// PID is the process's id inside the sandbox.
	PID   int      `json:"pid"`
	Tag   string   `json:"tag,omitempty"`
	Cmd   []string `json:"cmd"`
	Cwd   string   `json:"cwd"`
	Stdin bool     `json:"stdin,omitempty"`
	// PTY is the terminal's size, for a process started with one.
	PTY       *PTYSize  `json:"pty,omitempty"`
	Running   bool      `json:"running"`
	StartedAt time.Time `json:"started_at"`
	// Exit is set once the process has ended.
	Exit *ProcessExit `json:"exit,omitempty"`
}

// ProcessExit is how a process ended.
type ProcessExit struct {
	// ExitCode is the exit status, or 128+n when signal n killed it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed it ("SIGTERM"), if one did.
	Signal string `json:"signal,omitempty"`
	// Error says why the process ended outside its own doing: the sandbox
	// ended under it ("sandbox_ended": its end is not known, ExitCode is
	// -1), or was paused without its memory ("sandbox_paused": ExitCode
	// and Signal say how the pause ended it, -1 if not known).
	Error    string    `json:"error,omitempty"`
	EndedAt  time.Time `json:"ended_at"`
	Duration int64     `json:"duration_ms"`
}

// ProcessList is the answer of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []ProcessInfo `json:"processes"`
}

// Process event types, the "event:" of the SSE stream of
// GET /v1/sandboxes/{id}/processes/{pid}/events.
const (
	ProcessEventStart  = "start"
	ProcessEventStdout = "stdout"
	ProcessEventStderr = "stderr"
	// ProcessEventDropped says that output was dropped from the server's
	// buffer before this client read it (Dropped bytes).
	ProcessEventDropped = "dropped"
	ProcessEventEnd     = "end"
)

// ProcessEvent is one event of a process: its start, a chunk of output
// (Data holds the bytes, lossless; Text the same as UTF-8 with invalid
// sequences replaced), output lost from the buffer, or its end. Seq
// numbers a process's events from 1 (the SSE id); a client resumes after
// one with Last-Event-ID.
type ProcessEvent struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	PID     int    `json:"pid,omitempty"`
	Data    []byte `json:"data,omitempty"` // base64 in JSON
	Text    string `json:"text,omitempty"`
	Dropped int64  `json:"dropped,omitempty"`
	// Exit is set on the end event.
	Exit *ProcessExit `json:"exit,omitempty"`
}

// SandboxFile is a file or directory of a live sandbox.
type SandboxFile struct {
	// Path is absolute in the sandbox ("/workspace/data/a.csv").
	Path    string    `json:"path"`
	Name    string    `json:"name"`
	Type    string    `json:"type"` // file, dir, symlink or other
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mod_time"`
	// SymlinkTarget is what a symbolic link holds (links are described,
	// never followed).
	SymlinkTarget string `json:"symlink_target,omitempty"`
}

// FileEvent is a change in a watched directory (GET
// /v1/sandboxes/{id}/files/watch): Op is create, write, remove, rename or
// chmod; overflow (events were lost: list the directory again) or end
// (the watch ended by itself: its directory went, or the sandbox) describe
// the watch itself.
type FileEvent struct {
	Path string `json:"path"`
	Op   string `json:"op"`
}

// SandboxFileList is the answer of GET /v1/sandboxes/{id}/files/list.
type SandboxFileList struct {
	Path    string        `json:"path"`
	Entries []SandboxFile `json:"entries"`
}
