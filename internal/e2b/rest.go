package e2b

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/audit"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/httpbody"
	"github.com/corralhq/corral/internal/live"
	"github.com/corralhq/corral/internal/validate"
	"github.com/corralhq/corral/sandbox"
)

// clientID is answered as every sandbox's clientID (E2B's legacy field).
const clientID = "corral"

// createBody is the body of POST /sandboxes (and /v2/sandboxes). Fields
// the SDKs send that Corral has no use for (mcp, iam, volumeMounts, ...)
// are ignored.
type createBody struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int64            `json:"timeout"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
	Network    *struct {
		AllowOut []string `json:"allowOut"`
		// AllowPublicTraffic true serves the sandbox's ports without
		// its traffic access token (live: PublicPorts).
		AllowPublicTraffic *bool `json:"allowPublicTraffic"`
	} `json:"network"`
	// AutoPause pauses the sandbox at its timeout instead of killing it
	// (lifecycle.onTimeout "pause"), with its memory unless
	// AutoPauseMemory is false; AutoResume.Enabled resumes it on its next
	// call even when a client paused it (live: sandbox.SandboxLifecycle).
	AutoPause       bool  `json:"autoPause"`
	AutoPauseMemory *bool `json:"autoPauseMemory"`
	AutoResume      *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
}

// lifecycle is E2B's SandboxLifecycle, in getInfo's answer.
type lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

// timeoutBody is the body of POST /sandboxes/{id}/timeout and /connect.
type timeoutBody struct {
	Timeout *int64 `json:"timeout"`
}

// created is the answer of create, connect and resume (E2B's Sandbox).
type created struct {
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken"`
	// TrafficAccessToken is the same token: the code interpreter's SDK
	// sends it (as E2B-Traffic-Access-Token), not envdAccessToken, on its
	// context calls.
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// listed is a sandbox in a list (E2B's ListedSandbox).
type listed struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

// detail is the answer of GET /sandboxes/{id} (E2B's SandboxDetail).
type detail struct {
	listed
	Domain    *string    `json:"domain"`
	Lifecycle *lifecycle `json:"lifecycle,omitempty"`
}

// metric is one reading of GET /sandboxes/{id}/metrics (E2B's
// SandboxMetric): a live sandbox's sandbox.SandboxMetric in E2B's names.
// cpuUsedPct is of the sandbox's CPU limit, which cpuCount rounds up.
type metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemCache      int64     `json:"memCache"`
	MemTotal      int64     `json:"memTotal"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// tenantFn is a handler that knows its tenant.
type tenantFn func(w http.ResponseWriter, r *http.Request, tenant string)

// authed authenticates a control-plane call by its API key: X-API-Key, as
// the SDKs send it, or Authorization: Bearer.
func (s *Server) authed(h tenantFn) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if key == "" {
			if scheme, k, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
				key = strings.TrimSpace(k)
			}
		}
		if key == "" {
			refuse(w, fault.Unauthenticated, "send an API key as X-API-Key")
			return
		}
		tenant, ok := s.cfg.Keys.TenantOf(key)
		if !ok {
			refuse(w, fault.Unauthenticated, "invalid API key")
			return
		}
		h(w, r.WithContext(audit.With(r.Context(), s.cfg.Audit, audit.Actor{Tenant: tenant, KeyID: audit.KeyID(key)})), tenant)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	// The status line is sent; a failed write means the client left.
	_ = enc.Encode(v)
}

// decode reads a JSON body into v (httpbody: at most httpbody.MaxJSON, as
// every wire's, one value and nothing after it) and answers a bad one; an
// empty body leaves v as it is. Unknown fields are ignored: the SDKs send
// more than Corral uses.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := httpbody.ReadJSON(w, r, httpbody.MaxJSON, v, httpbody.Rules{}); err != nil {
		answer(w, fault.Of(err))
		return false
	}
	return true
}

// timeoutOf reads a timeout in seconds; nil is zero (the default).
func timeoutOf(w http.ResponseWriter, t *int64) (time.Duration, bool) {
	if t == nil {
		return 0, true
	}
	if *t < 0 || *t > math.MaxInt32 {
		refuse(w, fault.InvalidArgument, "timeout is a number of seconds, 0 or more")
		return 0, false
	}
	return validate.Duration(*t, time.Second), true
}

// readTimeout reads a {"timeout": seconds} body (timeout, connect,
// resume) and answers a bad one; without a timeout it is 0, or refused
// when required.
func readTimeout(w http.ResponseWriter, r *http.Request, required bool) (time.Duration, bool) {
	var body timeoutBody
	if !decode(w, r, &body) {
		return 0, false
	}
	if required && body.Timeout == nil {
		refuse(w, fault.InvalidArgument, "timeout is required")
		return 0, false
	}
	return timeoutOf(w, body.Timeout)
}

// sandboxID reads the path's sandbox id: one that cannot be a sandbox's
// is not found.
func sandboxID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !validate.ValidID(id) {
		refuse(w, fault.NotFound, fmt.Sprintf("sandbox '%s' not found", id))
		return "", false
	}
	return id, true
}

// routed reads the path's sandbox id and sends the call to the node that
// owns the sandbox; it reports whether this node serves it.
func (s *Server) routed(w http.ResponseWriter, r *http.Request, tenant string, forget bool) (string, bool) {
	id, ok := sandboxID(w, r)
	if !ok {
		return "", false
	}
	return id, s.cfg.Node.RouteSandbox(w, r, tenant, id, forget, s.fail)
}

func (s *Server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

func (s *Server) created(info sandbox.Info, token string) created {
	return created{SandboxID: info.SandboxID, TemplateID: info.Image, ClientID: clientID,
		EnvdVersion: s.cfg.EnvdVersion, EnvdAccessToken: token, TrafficAccessToken: token, Domain: s.domain()}
}

func (s *Server) listed(info sandbox.Info) listed {
	md := info.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return listed{SandboxID: info.SandboxID, TemplateID: info.Image, ClientID: clientID,
		StartedAt: info.CreatedAt, EndAt: info.ExpiresAt, CPUCount: int(math.Ceil(info.Limits.CPUs)),
		MemoryMB: info.Limits.MemoryMB, DiskSizeMB: info.Limits.DiskMB, Metadata: md, State: state(info),
		EnvdVersion: s.cfg.EnvdVersion}
}

// state is E2B's name of a sandbox's state: paused, or running (a sandbox
// being made again is running to its clients).
func state(info sandbox.Info) string {
	if info.State == "paused" {
		return "paused"
	}
	return "running"
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, tenant string) {
	var body createBody
	if !decode(w, r, &body) {
		return
	}
	if body.TemplateID == "" {
		refuse(w, fault.InvalidArgument, "templateID is required")
		return
	}
	timeout, ok := timeoutOf(w, body.Timeout)
	if !ok {
		return
	}
	req := templateRequest(body.TemplateID)
	if isSnapshotID(body.TemplateID) {
		// Made as the snapshot's sandbox was: its tier too.
		req = sandbox.CreateSandboxRequest{SnapshotID: body.TemplateID}
	} else {
		req.Tier = s.cfg.Tier
	}
	req.SandboxID = NewSandboxID()
	req.TimeoutSeconds = int64(timeout.Seconds())
	req.Metadata, req.Env = body.Metadata, body.EnvVars
	if body.Network != nil && len(body.Network.AllowOut) > 0 {
		req.Network = &sandbox.Network{Allow: body.Network.AllowOut}
	}
	if body.Network != nil && body.Network.AllowPublicTraffic != nil {
		req.PublicPorts = *body.Network.AllowPublicTraffic
	}
	if body.AutoPause || body.AutoResume != nil {
		req.Lifecycle = &sandbox.SandboxLifecycle{OnTimeout: live.OnTimeoutKill}
		if body.AutoPause {
			req.Lifecycle.OnTimeout, req.Lifecycle.KeepMemory = live.OnTimeoutPause, body.AutoPauseMemory
		}
		req.Lifecycle.AutoResume = body.AutoResume != nil && body.AutoResume.Enabled
	}
	// A fresh id is no other node's: it is made here.
	sb, info, err := s.cfg.Sandboxes.Create(r.Context(), tenant, req)
	if unknownImage(err) {
		// Not an image: a snapshot's name, if the tenant has one so named.
		byName := req
		byName.Image, byName.Language, byName.Tier, byName.SnapshotID = "", "", "", snapshotName(body.TemplateID)
		sb2, info2, err2 := s.cfg.Sandboxes.Create(r.Context(), tenant, byName)
		if err2 == nil || !unknownImage(err2) && fault.Of(err2).Kind != fault.Unimplemented {
			sb, info, err = sb2, info2, err2
		}
	}
	if err != nil {
		s.failCreate(w, err, body.TemplateID)
		return
	}
	token := newAccessToken(tenant)
	if err := sb.SetAccessToken(token); err != nil {
		// Nothing of a sandbox no client can reach may stay.
		if derr := s.cfg.Sandboxes.Kill(r.Context(), tenant, info.SandboxID); derr != nil {
			err = errors.Join(err, derr)
		}
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.created(info, token))
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	if err != nil {
		s.fail(w, err)
		return
	}
	info := sb.Info()
	d := detail{listed: s.listed(info), Domain: s.domain()}
	if l := info.Lifecycle; l != nil {
		d.Lifecycle = &lifecycle{AutoResume: l.AutoResume, OnTimeout: l.OnTimeout}
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, true)
	if !ok {
		return
	}
	if err := s.cfg.Sandboxes.Kill(r.Context(), tenant, id); err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	timeout, ok := readTimeout(w, r, true)
	if !ok {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	if err == nil {
		_, err = sb.SetTimeout(r.Context(), timeout)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// connect answers a running sandbox's id and access token (200), after
// resuming it if it was paused (201). A timeout that ends later than the
// sandbox would moves its end; an earlier one leaves it. A sandbox made
// through /v1 gets its access token now.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	timeout, ok := readTimeout(w, r, false)
	if !ok {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	if err != nil {
		s.fail(w, err)
		return
	}
	info := sb.Info()
	status := http.StatusOK
	if state(info) == "paused" {
		if info, err = sb.Resume(r.Context()); err != nil {
			s.fail(w, err)
			return
		}
		status = http.StatusCreated
	}
	if timeout > 0 && time.Now().Add(timeout).After(info.ExpiresAt) {
		if info, err = sb.SetTimeout(r.Context(), timeout); err != nil {
			s.fail(w, err)
			return
		}
	}
	token, err := s.token(sb)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, status, s.created(info, token))
}

// token returns a sandbox's access token, minting one if it has none.
func (s *Server) token(sb *live.Sandbox) (string, error) {
	s.mintMu.Lock()
	defer s.mintMu.Unlock()
	token, err := sb.AccessToken()
	if err != nil || token != "" {
		return token, err
	}
	token = newAccessToken(sb.Tenant())
	if err := sb.SetAccessToken(token); err != nil {
		return "", err
	}
	return token, nil
}

func (s *Server) pause(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	if err == nil {
		err = sb.Pause(r.Context())
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resume is the older SDKs' way back from a pause (the current ones
// connect): 201 and the sandbox, with the timeout given from now.
func (s *Server) resume(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	timeout, ok := readTimeout(w, r, false)
	if !ok {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	var info sandbox.Info
	if err == nil {
		info, err = sb.Resume(r.Context())
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	if timeout > 0 {
		if info, err = sb.SetTimeout(r.Context(), timeout); err != nil {
			s.fail(w, err)
			return
		}
	}
	token, err := s.token(sb)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.created(info, token))
}

// metrics answers a sandbox's readings (live.Sandbox.Metrics) from the
// second start to the second end, both unix seconds and optional.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request, tenant string) {
	id, ok := s.routed(w, r, tenant, false)
	if !ok {
		return
	}
	since, until, ok := metricsBounds(w, r)
	if !ok {
		return
	}
	sb, err := s.cfg.Sandboxes.Get(tenant, id)
	var readings []sandbox.SandboxMetric
	if err == nil {
		readings, err = sb.Metrics(r.Context(), since, until)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	out := make([]metric, 0, len(readings))
	for _, m := range readings {
		out = append(out, metric{Timestamp: m.Timestamp, TimestampUnix: m.Timestamp.Unix(),
			CPUCount: int(math.Ceil(m.CPUCores)), CPUUsedPct: m.CPUUsedPct, MemUsed: m.MemoryUsedBytes,
			MemCache: m.MemoryCacheBytes, MemTotal: m.MemoryLimitBytes, DiskUsed: m.DiskUsedBytes, DiskTotal: m.DiskLimitBytes})
	}
	writeJSON(w, http.StatusOK, out)
}

// metricsBounds reads the start and end of a metrics query (unix
// seconds, optional) as the bounds of live.Sandbox.Metrics: from start's
// second to the end of end's; it answers a bad one.
func metricsBounds(w http.ResponseWriter, r *http.Request) (since, until time.Time, ok bool) {
	q := r.URL.Query()
	var bounds [2]time.Time
	for i, name := range []string{"start", "end"} {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxUnix {
			refuse(w, fault.InvalidArgument, name+" is a unix time in seconds")
			return since, until, false
		}
		bounds[i] = time.Unix(n+int64(i), 0) // end: to the end of its second
	}
	if !bounds[0].IsZero() && !bounds[1].IsZero() && !bounds[1].After(bounds[0]) {
		refuse(w, fault.InvalidArgument, "end is before start")
		return since, until, false
	}
	return bounds[0], bounds[1], true
}

// maxUnix is the last second of year 9999.
const maxUnix = 253402300799

// listQuery is a list's filter, read from its query.
type listQuery struct {
	metadata     map[string]string
	states       map[string]bool // nil: every state
	template     string
	startedAfter time.Time
}

func (q listQuery) match(info sandbox.Info) bool {
	for k, v := range q.metadata {
		if got, ok := info.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return (q.states == nil || q.states[state(info)]) &&
		(q.template == "" || q.template == info.Image) &&
		(q.startedAfter.IsZero() || info.CreatedAt.After(q.startedAfter))
}

// parseMetadata reads E2B's metadata filter: the query parameter metadata
// holds k=v pairs joined by & (form-encoded), whose keys and values the
// SDKs URI-encode once more.
func parseMetadata(raw string) (map[string]string, error) {
	out := map[string]string{}
	if raw == "" {
		return out, nil
	}
	pairs, err := url.ParseQuery(raw)
	if err != nil {
		return nil, err
	}
	for k, vs := range pairs {
		key, err := url.PathUnescape(k)
		if err != nil {
			return nil, err
		}
		val, err := url.PathUnescape(vs[len(vs)-1])
		if err != nil {
			return nil, err
		}
		if key == "" {
			return nil, errors.New("empty key")
		}
		out[key] = val
	}
	return out, nil
}

func parseListQuery(w http.ResponseWriter, r *http.Request) (listQuery, bool) {
	qs := r.URL.Query()
	md, err := parseMetadata(qs.Get("metadata"))
	if err != nil {
		refuse(w, fault.InvalidArgument, "give metadata as metadata=KEY%3DVALUE%26KEY2%3DVALUE2")
		return listQuery{}, false
	}
	// A filter is bounded as the labels it matches are.
	if err := validate.CheckMetadata(md); err != nil {
		answer(w, fault.Of(err))
		return listQuery{}, false
	}
	q := listQuery{metadata: md, template: qs.Get("template")}
	for _, v := range qs["state"] {
		for st := range strings.SplitSeq(v, ",") {
			if st != "running" && st != "paused" {
				refuse(w, fault.InvalidArgument, "state is running, paused or both (state=running,paused)")
				return listQuery{}, false
			}
			if q.states == nil {
				q.states = map[string]bool{}
			}
			q.states[st] = true
		}
	}
	if v := qs.Get("startedAfter"); v != "" {
		if q.startedAfter, err = time.Parse(time.RFC3339, v); err != nil {
			refuse(w, fault.InvalidArgument, "startedAfter is an RFC 3339 time")
			return listQuery{}, false
		}
	}
	return q, true
}

// matching lists tenant's sandboxes q matches, in no order.
func (s *Server) matching(w http.ResponseWriter, r *http.Request, tenant string, q listQuery) ([]sandbox.Info, bool) {
	all, err := s.cfg.Node.Sandboxes(r.Context(), tenant)
	if err != nil {
		s.fail(w, err)
		return nil, false
	}
	return slices.DeleteFunc(all, func(info sandbox.Info) bool { return !q.match(info) }), true
}

// listV1 answers GET /sandboxes: every running sandbox that matches, one
// page.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request, tenant string) {
	q, ok := parseListQuery(w, r)
	if !ok {
		return
	}
	q.states = map[string]bool{"running": true}
	infos, ok := s.matching(w, r, tenant, q)
	if !ok {
		return
	}
	slices.SortFunc(infos, newestFirst)
	out := make([]listed, 0, len(infos))
	for _, info := range infos {
		out = append(out, s.listed(info))
	}
	writeJSON(w, http.StatusOK, out)
}

// List pages.
const (
	defaultLimit = 100
	maxLimit     = 100
)

// newestFirst orders sandboxes by start, newest first, then by id.
func newestFirst(a, b sandbox.Info) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.SandboxID, b.SandboxID)
}

func oldestFirst(a, b sandbox.Info) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.SandboxID, b.SandboxID)
}

// pageToken is where a page ends: the start and id of its last sandbox.
// The next page starts after it in the same order, so sandboxes made or
// killed between pages move no other sandbox to another page.
type pageToken struct {
	CreatedAt time.Time `json:"t"`
	SandboxID string    `json:"i"`
	// Order binds the token to its query's order.
	Order string `json:"o"`
}

func encodeToken(p pageToken) string {
	b, _ := json.Marshal(p)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeToken(s string) (pageToken, error) {
	var p pageToken
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return p, err
	}
	err = json.Unmarshal(b, &p)
	return p, err
}

// listV2 answers GET /v2/sandboxes: a page of the sandboxes that match,
// running and paused unless state says, newest first unless order=asc; a
// next page's token is in the X-Next-Token header.
func (s *Server) listV2(w http.ResponseWriter, r *http.Request, tenant string) {
	q, ok := parseListQuery(w, r)
	if !ok {
		return
	}
	qs := r.URL.Query()
	limit := defaultLimit
	if v := qs.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			refuse(w, fault.InvalidArgument, fmt.Sprintf("limit is 1 to %d", maxLimit))
			return
		}
		limit = n
	}
	order, cmp := "desc", newestFirst
	switch qs.Get("order") {
	case "", "desc":
	case "asc":
		order, cmp = "asc", oldestFirst
	default:
		refuse(w, fault.InvalidArgument, "order is asc or desc")
		return
	}
	var after *sandbox.Info
	if v := qs.Get("nextToken"); v != "" {
		p, err := decodeToken(v)
		if err != nil || p.Order != order || p.SandboxID == "" {
			refuse(w, fault.InvalidArgument, "nextToken is not one this server gave for this order")
			return
		}
		after = &sandbox.Info{SandboxID: p.SandboxID, CreatedAt: p.CreatedAt}
	}
	infos, ok := s.matching(w, r, tenant, q)
	if !ok {
		return
	}
	slices.SortFunc(infos, cmp)
	if after != nil {
		i, _ := slices.BinarySearchFunc(infos, *after, cmp)
		// Past the token's own sandbox, if it is still there.
		if i < len(infos) && cmp(infos[i], *after) == 0 {
			i++
		}
		infos = infos[i:]
	}
	if len(infos) > limit {
		last := infos[limit-1]
		w.Header().Set("X-Next-Token", encodeToken(pageToken{CreatedAt: last.CreatedAt, SandboxID: last.SandboxID, Order: order}))
		infos = infos[:limit]
	}
	out := make([]listed, 0, len(infos))
	for _, info := range infos {
		out = append(out, s.listed(info))
	}
	writeJSON(w, http.StatusOK, out)
}
