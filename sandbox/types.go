package sandbox

import "time"

// Status is the lifecycle state of an execution.
type Status string

// Execution states. Queued and running are transient; the rest are final.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSuccess   Status = "success"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Final reports whether s is a terminal state.
func (s Status) Final() bool {
	return s == StatusSuccess || s == StatusFailed || s == StatusCancelled
}

// ErrorType classifies a failed execution so a caller can decide what to do
// next without parsing messages.
type ErrorType string

// Error types. See docs/errors.md for what a caller should do about each.
const (
	ErrCompile       ErrorType = "compile_error"  // the code did not compile or parse: fix it
	ErrRuntime       ErrorType = "runtime_error"  // the program failed: fix it or tell the user
	ErrTimeout       ErrorType = "timeout"        // it ran past limits.timeout_ms
	ErrOOM           ErrorType = "oom"            // it needed more than limits.memory_mb
	ErrResourceLimit ErrorType = "resource_limit" // it exhausted processes or disk
	ErrInternal      ErrorType = "internal_error" // Corral failed: retry
	ErrInput         ErrorType = "input_error"    // the request or an input file was unusable
	ErrCancelled     ErrorType = "cancelled"      // a client cancelled it
)

// Retryable reports whether running the same request again may succeed
// without changing it.
func (t ErrorType) Retryable() bool { return t == ErrInternal }

// Tier is a sandbox's isolation tier.
type Tier string

// Tiers. Auto lets the server route by risk.
const (
	TierAuto      Tier = "auto"
	TierContainer Tier = "container"
	TierGVisor    Tier = "gvisor"
)

// Isolation is Tier's old name, kept for one release.
//
// Deprecated: use Tier.
type Isolation = Tier

// The tiers by their old names, kept for one release.
//
// Deprecated: use TierAuto, TierContainer and TierGVisor.
const (
	IsolationAuto      = TierAuto
	IsolationContainer = TierContainer
	IsolationGVisor    = TierGVisor
)

// Limits bound one execution. Zero fields take the server's defaults.
type Limits struct {
	TimeoutMS int64   `json:"timeout_ms,omitempty"`
	MemoryMB  int64   `json:"memory_mb,omitempty"`
	CPUCores  float64 `json:"cpu_cores,omitempty"`
	DiskMB    int64   `json:"disk_mb,omitempty"`
}

// File is an input placed under /workspace/input before the code runs. Exactly
// one of URL and ContentBase64 is set.
type File struct {
	Path          string `json:"path"`
	URL           string `json:"url,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

// Network opens egress through the server's proxy to the listed domains
// (suffix patterns such as "*.github.com"). Without it there is no network.
type Network struct {
	Allow []string `json:"allow,omitempty"`
}

// ExecuteRequest is the body of POST /v1/executions.
type ExecuteRequest struct {
	// ExecutionID is optional and client-chosen; the same id again returns the
	// same execution instead of running it twice.
	ExecutionID string            `json:"execution_id,omitempty"`
	SessionID   string            `json:"session_id,omitempty"`
	Language    string            `json:"language"`
	Code        string            `json:"code"`
	Files       []File            `json:"files,omitempty"`
	Limits      Limits            `json:"limits,omitzero"`
	Env         map[string]string `json:"env,omitempty"`
	Network     *Network          `json:"network,omitempty"`
	// Tier is container, gvisor or auto (default: the server routes by
	// risk).
	Tier Tier `json:"tier,omitempty"`
	// Isolation is Tier's old name, accepted for one release; a request
	// that gives both gives the same tier in both.
	//
	// Deprecated: use Tier.
	Isolation   Tier   `json:"isolation,omitempty"`
	Untrusted   bool   `json:"untrusted,omitempty"`
	Image       string `json:"image,omitempty"`
	CallbackURL string `json:"callback_url,omitempty"`
}

// Failure says why an execution did not succeed.
type Failure struct {
	Type      ErrorType `json:"type"`
	Message   string    `json:"message"`
	Retryable bool      `json:"retryable"`
}

// Limit names a limit a sandbox enforces by refusing something.
type Limit string

// Limits that can refuse a program something without ending it.
const (
	// LimitProcesses refused a fork or a thread: the server's process
	// limit (the pids cgroup; RLIMIT_NPROC on the gvisor tier).
	LimitProcesses Limit = "processes"
	// LimitMemory killed a process for exceeding limits.memory_mb.
	LimitMemory Limit = "memory"
	// LimitDisk refused writes: limits.disk_mb was full.
	LimitDisk Limit = "disk"
)

// LimitHit is a limit that refused the program something during the run.
// A record lists every limit hit, whatever its verdict: a program that met
// a limit and recovered still succeeds, and LimitsHit is where it shows.
type LimitHit struct {
	Limit Limit `json:"limit"`
	// Max is the limit in force: processes and threads (processes), MB
	// (memory, disk).
	Max int64 `json:"max,omitempty"`
	// Count is how many times the limit refused, where the kernel counts
	// it: forks refused (processes, container tier), processes killed
	// (memory). It is absent where nothing counts (the gvisor tier's
	// processes, disk).
	Count int64 `json:"count,omitempty"`
	// Detail says what was refused, for a person or a model.
	Detail string `json:"detail"`
}

// Artifact is a file the program left under /workspace/output.
type Artifact struct {
	Path      string    `json:"path"`
	URL       string    `json:"url,omitempty"`
	Size      int64     `json:"size"`
	MIME      string    `json:"mime,omitempty"`
	SHA256    string    `json:"sha256,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// SkippedArtifact is an entry of /workspace/output left out of the
// artifacts.
type SkippedArtifact struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Result is the execution record: the answer of GET /v1/executions/{id}, of a
// waited POST, and the body of a callback.
type Result struct {
	ExecutionID string   `json:"execution_id"`
	SessionID   string   `json:"session_id,omitempty"`
	Language    string   `json:"language"`
	Status      Status   `json:"status"`
	Error       *Failure `json:"error,omitempty"`
	// ExitCode is the program's exit status; 128+N when signal N killed it.
	// It is absent when the program never ran to an end (queued, timeout
	// before exit, input or internal errors).
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	// LimitsHit are the limits that refused the program something (a
	// fork, memory, disk space), on success as on failure; absent when
	// none did.
	LimitsHit []LimitHit `json:"limits_hit,omitempty"`
	// Summary is a short, exact account of the execution for a model to
	// read instead of the raw output: on success the exit code, the first
	// lines of stdout and the artifacts; on failure the error type, stderr,
	// the exit code and what to do next. It is built without a model, the
	// same way every time, and capped in size.
	Summary string `json:"summary,omitempty"`

	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutBytes     int64  `json:"stdout_bytes"`
	StdoutLines     int64  `json:"stdout_lines"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrBytes     int64  `json:"stderr_bytes"`
	StderrLines     int64  `json:"stderr_lines"`
	StderrTruncated bool   `json:"stderr_truncated"`

	DurationMS   int64  `json:"duration_ms"`
	QueueMS      int64  `json:"queue_ms"`
	PeakMemoryMB int64  `json:"peak_memory_mb"`
	Tier         string `json:"tier,omitempty"`
	TierReason   string `json:"tier_reason,omitempty"`
	Image        string `json:"image,omitempty"`
	ImageDigest  string `json:"image_digest,omitempty"`

	Limits    Limits     `json:"limits,omitzero"`
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// ArtifactsSkipped says what under /workspace/output was not collected
	// and why (a symlink, a FIFO, over a cap).
	ArtifactsSkipped []SkippedArtifact `json:"artifacts_skipped,omitempty"`
	// Callback is the delivery state of the request's callback_url.
	Callback *CallbackState `json:"callback,omitempty"`

	CreatedAt  time.Time `json:"created_at,omitzero"`
	StartedAt  time.Time `json:"started_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
}

// CallbackState is how the delivery of an execution's callback went.
type CallbackState struct {
	URL        string `json:"url"`
	DeliveryID string `json:"delivery_id"`
	// State is pending (being retried), delivered or failed (given up).
	State       string    `json:"state"`
	Attempts    int       `json:"attempts"`
	LastStatus  int       `json:"last_status,omitempty"`
	LastError   string    `json:"last_error,omitempty"`
	NextAttempt time.Time `json:"next_attempt,omitzero"`
}

// EgressAttempt is one connection a sandbox asked its egress proxy for
// (GET /v1/executions/{id}/egress).
type EgressAttempt struct {
	Time    time.Time `json:"time"`
	Method  string    `json:"method"`
	Host    string    `json:"host"`
	Port    int       `json:"port"`
	Allowed bool      `json:"allowed"`
	// Reason says why a refused attempt was refused.
	Reason    string `json:"reason,omitempty"`
	Address   string `json:"address,omitempty"`
	Status    int    `json:"status,omitempty"`
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
}
