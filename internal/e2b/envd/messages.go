package envd

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The messages of E2B's envd services process.Process and
// filesystem.Filesystem (package process and package filesystem of its
// protocol), written by hand for the JSON codec: proto3 JSON names
// (lowerCamelCase), oneofs as pointers of which at most one is set, and
// the scalar types below where proto3 JSON differs from encoding/json.

// Uint32 is a proto3 uint32: JSON gives it as a number or a string.
type Uint32 uint32

// UnmarshalJSON reads a number or a numeric string.
func (u *Uint32) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	s = strings.Trim(s, `"`)
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		// Proto3 JSON allows an integral number in exponent form.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f < 0 || f > 1<<32-1 || f != float64(uint32(f)) {
			return fmt.Errorf("%s is not a uint32", b)
		}
		n = uint64(f)
	}
	*u = Uint32(n)
	return nil
}

// Int64 is a proto3 int64: a JSON string when written (as protobuf-es and
// every proto3 JSON writer do), a number or a string when read.
type Int64 int64

// MarshalJSON writes the number as a string.
func (i Int64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(i), 10) + `"`), nil
}

// UnmarshalJSON reads a number or a numeric string.
func (i *Int64) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	n, err := strconv.ParseInt(strings.Trim(s, `"`), 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not an int64", b)
	}
	*i = Int64(n)
	return nil
}

// Bytes is a proto3 bytes field: base64 in JSON, standard or URL-safe,
// padded or not.
type Bytes []byte

// MarshalJSON writes standard padded base64.
func (b Bytes) MarshalJSON() ([]byte, error) {
	return json.Marshal(base64.StdEncoding.EncodeToString(b))
}

// UnmarshalJSON reads any of the base64 forms proto3 JSON allows.
func (b *Bytes) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("bytes: %w", err)
	}
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		s = strings.NewReplacer("-", "+", "_", "/").Replace(s)
	}
	out, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("bytes: not base64: %w", err)
	}
	*b = out
	return nil
}

// Timestamp is a google.protobuf.Timestamp: an RFC 3339 string in UTC.
type Timestamp struct{ time.Time }

// MarshalJSON writes RFC 3339 in UTC ("Z"), with nanoseconds when there
// are any.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.UTC().Format(time.RFC3339Nano))
}

// UnmarshalJSON reads RFC 3339.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("timestamp: %w", err)
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("timestamp: %w", err)
	}
	t.Time = v
	return nil
}

// enumJSON reads a proto3 JSON enum: its name, or its number.
func enumJSON(b []byte, names map[string]int32, what string) (int32, error) {
	if string(b) == "null" {
		return 0, nil
	}
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		n, ok := names[name]
		if !ok {
			return 0, fmt.Errorf("%s: unknown value %q", what, name)
		}
		return n, nil
	}
	var n int32
	if err := json.Unmarshal(b, &n); err != nil {
		return 0, fmt.Errorf("%s: give a name or a number", what)
	}
	return n, nil
}

func enumName(n int32, names map[string]int32) string {
	for k, v := range names {
		if v == n {
			return k
		}
	}
	return ""
}

// enumOut writes an enum by name (its number when it has none).
func enumOut(n int32, names map[string]int32) ([]byte, error) {
	if s := enumName(n, names); s != "" {
		return json.Marshal(s)
	}
	return json.Marshal(n)
}

// Signal is process.Signal.
type Signal int32

// The signals process.Signal names.
const (
	SignalUnspecified Signal = 0
	SignalSIGTERM     Signal = 15
	SignalSIGKILL     Signal = 9
)

var signalNames = map[string]int32{"SIGNAL_UNSPECIFIED": 0, "SIGNAL_SIGTERM": 15, "SIGNAL_SIGKILL": 9}

// MarshalJSON writes the signal's name.
func (s Signal) MarshalJSON() ([]byte, error) { return enumOut(int32(s), signalNames) }

// UnmarshalJSON reads a name or a number.
func (s *Signal) UnmarshalJSON(b []byte) error {
	n, err := enumJSON(b, signalNames, "signal")
	*s = Signal(n)
	return err
}

// FileType is filesystem.FileType.
type FileType int32

// The file types filesystem.FileType names.
const (
	FileUnspecified FileType = 0
	FileFile        FileType = 1
	FileDirectory   FileType = 2
	FileSymlink     FileType = 3
)

var fileTypeNames = map[string]int32{"FILE_TYPE_UNSPECIFIED": 0, "FILE_TYPE_FILE": 1, "FILE_TYPE_DIRECTORY": 2, "FILE_TYPE_SYMLINK": 3}

// MarshalJSON writes the type's name.
func (t FileType) MarshalJSON() ([]byte, error) { return enumOut(int32(t), fileTypeNames) }

// UnmarshalJSON reads a name or a number.
func (t *FileType) UnmarshalJSON(b []byte) error {
	n, err := enumJSON(b, fileTypeNames, "type")
	*t = FileType(n)
	return err
}

// EventType is filesystem.EventType.
type EventType int32

// The event types filesystem.EventType names.
const (
	EventUnspecified EventType = 0
	EventCreate      EventType = 1
	EventWrite       EventType = 2
	EventRemove      EventType = 3
	EventRename      EventType = 4
	EventChmod       EventType = 5
)

var eventTypeNames = map[string]int32{"EVENT_TYPE_UNSPECIFIED": 0, "EVENT_TYPE_CREATE": 1, "EVENT_TYPE_WRITE": 2,
	"EVENT_TYPE_REMOVE": 3, "EVENT_TYPE_RENAME": 4, "EVENT_TYPE_CHMOD": 5}

// MarshalJSON writes the type's name.
func (t EventType) MarshalJSON() ([]byte, error) { return enumOut(int32(t), eventTypeNames) }

// UnmarshalJSON reads a name or a number.
func (t *EventType) UnmarshalJSON(b []byte) error {
	n, err := enumJSON(b, eventTypeNames, "type")
	*t = EventType(n)
	return err
}

// Messages of process.Process.

// PTYSize is process.PTY.Size.
type PTYSize struct {
	Cols Uint32 `json:"cols"`
	Rows Uint32 `json:"rows"`
}

// PTY is process.PTY.
type PTY struct {
	Size *PTYSize `json:"size,omitempty"`
}

// ProcessConfig is process.ProcessConfig.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// ProcessInfo is process.ProcessInfo.
type ProcessInfo struct {
	Config *ProcessConfig `json:"config,omitempty"`
	PID    Uint32         `json:"pid"`
	Tag    *string        `json:"tag,omitempty"`
}

// ListRequest is process.ListRequest.
type ListRequest struct{}

// ListResponse is process.ListResponse.
type ListResponse struct {
	Processes []ProcessInfo `json:"processes"`
}

// StartRequest is process.StartRequest.
type StartRequest struct {
	Process *ProcessConfig `json:"process,omitempty"`
	PTY     *PTY           `json:"pty,omitempty"`
	Tag     *string        `json:"tag,omitempty"`
	Stdin   *bool          `json:"stdin,omitempty"`
}

// ProcessSelector is process.ProcessSelector: one of PID and Tag.
type ProcessSelector struct {
	PID *Uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// UpdateRequest is process.UpdateRequest.
type UpdateRequest struct {
	Process *ProcessSelector `json:"process,omitempty"`
	PTY     *PTY             `json:"pty,omitempty"`
}

// UpdateResponse is process.UpdateResponse.
type UpdateResponse struct{}

// StartEvent is process.ProcessEvent.StartEvent.
type StartEvent struct {
	PID Uint32 `json:"pid"`
}

// DataEvent is process.ProcessEvent.DataEvent: one of Stdout, Stderr and
// PTY.
type DataEvent struct {
	Stdout *Bytes `json:"stdout,omitempty"`
	Stderr *Bytes `json:"stderr,omitempty"`
	PTY    *Bytes `json:"pty,omitempty"`
}

// EndEvent is process.ProcessEvent.EndEvent.
type EndEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

// KeepAlive is an empty keep-alive event.
type KeepAlive struct{}

// ProcessEvent is process.ProcessEvent: one of its four events.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *KeepAlive  `json:"keepalive,omitempty"`
}

// StartResponse is process.StartResponse.
type StartResponse struct {
	Event *ProcessEvent `json:"event,omitempty"`
}

// ConnectRequest is process.ConnectRequest.
type ConnectRequest struct {
	Process *ProcessSelector `json:"process,omitempty"`
}

// ConnectResponse is process.ConnectResponse.
type ConnectResponse struct {
	Event *ProcessEvent `json:"event,omitempty"`
}

// ProcessInput is process.ProcessInput: one of Stdin and PTY.
type ProcessInput struct {
	Stdin *Bytes `json:"stdin,omitempty"`
	PTY   *Bytes `json:"pty,omitempty"`
}

// SendInputRequest is process.SendInputRequest.
type SendInputRequest struct {
	Process *ProcessSelector `json:"process,omitempty"`
	Input   *ProcessInput    `json:"input,omitempty"`
}

// SendInputResponse is process.SendInputResponse.
type SendInputResponse struct{}

// StreamInputRequest is process.StreamInputRequest (a client stream).
type StreamInputRequest struct {
	Start *struct {
		Process *ProcessSelector `json:"process,omitempty"`
	} `json:"start,omitempty"`
	Data *struct {
		Input *ProcessInput `json:"input,omitempty"`
	} `json:"data,omitempty"`
	Keepalive *KeepAlive `json:"keepalive,omitempty"`
}

// StreamInputResponse is process.StreamInputResponse.
type StreamInputResponse struct{}

// SendSignalRequest is process.SendSignalRequest.
type SendSignalRequest struct {
	Process *ProcessSelector `json:"process,omitempty"`
	Signal  Signal           `json:"signal"`
}

// SendSignalResponse is process.SendSignalResponse.
type SendSignalResponse struct{}

// CloseStdinRequest is process.CloseStdinRequest.
type CloseStdinRequest struct {
	Process *ProcessSelector `json:"process,omitempty"`
}

// CloseStdinResponse is process.CloseStdinResponse.
type CloseStdinResponse struct{}

// Messages of filesystem.Filesystem.

// EntryInfo is filesystem.EntryInfo.
type EntryInfo struct {
	Name          string            `json:"name"`
	Type          FileType          `json:"type"`
	Path          string            `json:"path"`
	Size          Int64             `json:"size"`
	Mode          Uint32            `json:"mode"`
	Permissions   string            `json:"permissions"`
	Owner         string            `json:"owner"`
	Group         string            `json:"group"`
	ModifiedTime  *Timestamp        `json:"modifiedTime,omitempty"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// StatRequest is filesystem.StatRequest.
type StatRequest struct {
	Path string `json:"path"`
}

// StatResponse is filesystem.StatResponse.
type StatResponse struct {
	Entry *EntryInfo `json:"entry,omitempty"`
}

// MakeDirRequest is filesystem.MakeDirRequest.
type MakeDirRequest struct {
	Path string `json:"path"`
}

// MakeDirResponse is filesystem.MakeDirResponse.
type MakeDirResponse struct {
	Entry *EntryInfo `json:"entry,omitempty"`
}

// MoveRequest is filesystem.MoveRequest.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// MoveResponse is filesystem.MoveResponse.
type MoveResponse struct {
	Entry *EntryInfo `json:"entry,omitempty"`
}

// ListDirRequest is filesystem.ListDirRequest.
type ListDirRequest struct {
	Path  string `json:"path"`
	Depth Uint32 `json:"depth"`
}

// ListDirResponse is filesystem.ListDirResponse.
type ListDirResponse struct {
	Entries []EntryInfo `json:"entries"`
}

// RemoveRequest is filesystem.RemoveRequest.
type RemoveRequest struct {
	Path string `json:"path"`
}

// RemoveResponse is filesystem.RemoveResponse.
type RemoveResponse struct{}

// WatchDirRequest is filesystem.WatchDirRequest.
type WatchDirRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

// FilesystemEvent is filesystem.FilesystemEvent.
type FilesystemEvent struct {
	Name  string     `json:"name"`
	Type  EventType  `json:"type"`
	Entry *EntryInfo `json:"entry,omitempty"`
}

// WatchDirStart is filesystem.WatchDirResponse.StartEvent.
type WatchDirStart struct{}

// WatchDirResponse is filesystem.WatchDirResponse: one of Start,
// Filesystem and Keepalive.
type WatchDirResponse struct {
	Start      *WatchDirStart   `json:"start,omitempty"`
	Filesystem *FilesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *KeepAlive       `json:"keepalive,omitempty"`
}

// CreateWatcherRequest is filesystem.CreateWatcherRequest.
type CreateWatcherRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive"`
	IncludeEntry       bool   `json:"includeEntry"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts"`
}

// CreateWatcherResponse is filesystem.CreateWatcherResponse.
type CreateWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

// GetWatcherEventsRequest is filesystem.GetWatcherEventsRequest.
type GetWatcherEventsRequest struct {
	WatcherID string `json:"watcherId"`
}

// GetWatcherEventsResponse is filesystem.GetWatcherEventsResponse.
type GetWatcherEventsResponse struct {
	Events []FilesystemEvent `json:"events"`
}

// RemoveWatcherRequest is filesystem.RemoveWatcherRequest.
type RemoveWatcherRequest struct {
	WatcherID string `json:"watcherId"`
}

// RemoveWatcherResponse is filesystem.RemoveWatcherResponse.
type RemoveWatcherResponse struct{}

// Proto3 JSON readers accept a field's proto name as well as its JSON
// name: the requests with names of two words read both.

// UnmarshalJSON reads includeEntry or include_entry, and so on.
func (r *WatchDirRequest) UnmarshalJSON(b []byte) error {
	var v watchFields
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = WatchDirRequest{Path: v.Path, Recursive: v.Recursive, IncludeEntry: v.includeEntry(), AllowNetworkMounts: v.allowNetworkMounts()}
	return nil
}

// UnmarshalJSON reads includeEntry or include_entry, and so on.
func (r *CreateWatcherRequest) UnmarshalJSON(b []byte) error {
	var v watchFields
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = CreateWatcherRequest{Path: v.Path, Recursive: v.Recursive, IncludeEntry: v.includeEntry(), AllowNetworkMounts: v.allowNetworkMounts()}
	return nil
}

type watchFields struct {
	Path                    string `json:"path"`
	Recursive               bool   `json:"recursive"`
	IncludeEntry            *bool  `json:"includeEntry"`
	IncludeEntrySnake       *bool  `json:"include_entry"`
	AllowNetworkMounts      *bool  `json:"allowNetworkMounts"`
	AllowNetworkMountsSnake *bool  `json:"allow_network_mounts"`
}

func (w watchFields) includeEntry() bool {
	return (w.IncludeEntry != nil && *w.IncludeEntry) || (w.IncludeEntrySnake != nil && *w.IncludeEntrySnake)
}

func (w watchFields) allowNetworkMounts() bool {
	return (w.AllowNetworkMounts != nil && *w.AllowNetworkMounts) || (w.AllowNetworkMountsSnake != nil && *w.AllowNetworkMountsSnake)
}

type watcherIDFields struct {
	WatcherID      string `json:"watcherId"`
	WatcherIDSnake string `json:"watcher_id"`
}

func (w watcherIDFields) id() string {
	if w.WatcherID != "" {
		return w.WatcherID
	}
	return w.WatcherIDSnake
}

// UnmarshalJSON reads watcherId or watcher_id.
func (r *GetWatcherEventsRequest) UnmarshalJSON(b []byte) error {
	var v watcherIDFields
	err := json.Unmarshal(b, &v)
	r.WatcherID = v.id()
	return err
}

// UnmarshalJSON reads watcherId or watcher_id.
func (r *RemoveWatcherRequest) UnmarshalJSON(b []byte) error {
	var v watcherIDFields
	err := json.Unmarshal(b, &v)
	r.WatcherID = v.id()
	return err
}
