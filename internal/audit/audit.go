// Package audit is the audit trail: what every key did to every live
// sandbox and execution, per tenant, tamper-evident. It owns the event
// (sandbox.AuditEvent), the canonical encoding that chains a tenant's
// events by hash, Verify, the context that carries who is calling from
// the edge (api, e2b, node) to the choke points that record (live,
// kernel, the egress proxy), and the Writer that batches events to the
// store off the caller's path, then to optional sinks (JSON lines to a
// file or a webhook).
//
// # Hash chain
//
// Each tenant's events are numbered from 1 (Seq) by the store, in the
// transaction that inserts them, from a per-tenant head row locked for
// that transaction: nodes writing for one tenant at once take turns, and
// the chain has one order. An event's Hash is
//
//	hex(SHA-256(Canonical(e)))
//
// where Canonical(e) is the bytes "corral-audit-v1\n" followed by the
// JSON array (encoding/json, HTML escaping off, no spaces)
//
//	[tenant, seq, time in unix microseconds, key_id, node, sandbox_id,
//	 execution_id, action, outcome, error, [[field, value], ...], prev_hash]
//
// with the fields sorted by name, strings as stored (valid UTF-8 without
// NUL: Clean makes them so before anything is hashed). PrevHash is the
// Hash of the event numbered Seq-1, "" for the first. Editing an event
// breaks its own hash; recomputing it breaks the next event's PrevHash;
// deleting one leaves a gap in Seq; all three are what Verify names.
//
// Retention deletes a tenant's oldest events and remembers the last Seq
// it deleted, so the first kept event is where a check may start.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/corralhq/corral/sandbox"
)

// Event is an audit event; the wire type is the one stored and hashed.
type Event = sandbox.AuditEvent

// Actions. The fields each carries are in docs/audit.md.
const (
	ExecutionSubmit = "execution.submit"
	SandboxCreate   = "sandbox.create"
	SandboxKill     = "sandbox.kill"
	SandboxPause    = "sandbox.pause"
	SandboxResume   = "sandbox.resume"
	SandboxSnapshot = "sandbox.snapshot"
	SandboxFork     = "sandbox.fork"
	SnapshotDelete  = "snapshot.delete"
	ProcessStart    = "process.start"
	ProcessEnd      = "process.end"
	FileWrite       = "file.write"
	FileRemove      = "file.remove"
	FileRename      = "file.rename"
	ContextRun      = "context.run"
	ContextFork     = "context.fork"
	EgressAllowed   = "egress.allowed"
	EgressDenied    = "egress.denied"
	SecretInjected  = "secret.injected"
)

// Outcomes.
const (
	OK     = sandbox.AuditOK
	Failed = sandbox.AuditError
	Denied = sandbox.AuditDenied
)

// Bounds on what one event keeps: a field or error longer is cut (and
// says so), so that an argv of a megabyte costs the trail a few KiB.
const (
	MaxField  = 4 << 10
	MaxFields = 32
)

// Clean makes e storable and hashable the same way everywhere: text valid
// UTF-8 without NUL, fields and errors cut to MaxField, at most MaxFields
// fields, the time at microsecond precision in UTC.
func Clean(e *Event) {
	for _, s := range []*string{&e.Tenant, &e.KeyID, &e.Node, &e.SandboxID, &e.ExecutionID, &e.Action, &e.Outcome, &e.Error} {
		*s = cleanText(*s)
	}
	if len(e.Fields) > 0 {
		out := make(map[string]string, len(e.Fields))
		for _, k := range slices.Sorted(maps.Keys(e.Fields)) {
			if len(out) == MaxFields {
				break
			}
			out[cleanText(k)] = cleanText(e.Fields[k])
		}
		e.Fields = out
	}
	e.Time = e.Time.Truncate(time.Microsecond).UTC()
}

func cleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) > MaxField {
		cut := MaxField
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…(cut)"
	}
	return s
}

// Canonical returns the bytes e's Hash is the SHA-256 of (the package
// comment defines them). e must have been through Clean.
func Canonical(e *Event) []byte {
	fields := make([][2]string, 0, len(e.Fields))
	for _, k := range slices.Sorted(maps.Keys(e.Fields)) {
		fields = append(fields, [2]string{k, e.Fields[k]})
	}
	var b bytes.Buffer
	b.WriteString("corral-audit-v1\n")
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Only strings, integers and arrays of them: Encode cannot fail.
	_ = enc.Encode([]any{e.Tenant, e.Seq, e.Time.UnixMicro(), e.KeyID, e.Node, e.SandboxID, e.ExecutionID,
		e.Action, e.Outcome, e.Error, fields, e.PrevHash})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Hash returns the hash of e (its Hash field aside).
func Hash(e *Event) string {
	h := sha256.Sum256(Canonical(e))
	return hex.EncodeToString(h[:])
}

// Seal numbers e after the head (seq, hash) of its tenant's chain, links
// and hashes it; it returns the new head. The store calls it in the
// transaction that holds the head.
func Seal(e *Event, seq int64, prev string) (int64, string) {
	Clean(e)
	e.Seq, e.PrevHash = seq+1, prev
	e.Hash = Hash(e)
	return e.Seq, e.Hash
}

// Head is a tenant's chain as the store keeps it: the last event's number
// and hash, and the last number retention deleted.
type Head struct {
	Seq    int64
	Hash   string
	Pruned int64
}

// Broken names the first link of a chain that does not hold.
type Broken struct {
	Tenant string
	// Seq is the event at fault: the one whose content no longer matches
	// its hash, whose PrevHash does not match the event before, or the
	// first number missing.
	Seq    int64
	Reason string
}

func (b *Broken) Error() string {
	return fmt.Sprintf("audit chain of tenant %s broken at event %d: %s", b.Tenant, b.Seq, b.Reason)
}

// Verifier checks a tenant's events in order, a page at a time: Next for
// each event (by ascending Seq), then End. The first broken link is
// returned as a *Broken, and every later call returns it again.
type Verifier struct {
	tenant   string
	head     Head
	from, to int64
	// expect is the next Seq due; prev is the hash it must carry (""
	// with known false: the first event checked, whose predecessor is not
	// in the range).
	expect int64
	prev   string
	known  bool
	n      int64
	err    *Broken
}

// NewVerifier checks tenant's events numbered from..to (to 0: up to the
// head). from 0 starts at the first kept event (head.Pruned+1), whose
// PrevHash can be checked only when it is event 1.
func NewVerifier(tenant string, head Head, from, to int64) *Verifier {
	if from <= head.Pruned {
		from = head.Pruned + 1
	}
	if to <= 0 || to > head.Seq {
		to = head.Seq
	}
	return &Verifier{tenant: tenant, head: head, from: from, to: to, expect: from, known: from == 1}
}

// Range is the numbers the Verifier checks.
func (v *Verifier) Range() (from, to int64) { return v.from, v.to }

// Checked counts the events that held.
func (v *Verifier) Checked() int64 { return v.n }

func (v *Verifier) fail(seq int64, format string, args ...any) error {
	v.err = &Broken{Tenant: v.tenant, Seq: seq, Reason: fmt.Sprintf(format, args...)}
	return v.err
}

// Next checks e, the next event the store holds in the range.
func (v *Verifier) Next(e *Event) error {
	if v.err != nil {
		return v.err
	}
	if e.Seq < v.expect {
		return v.fail(e.Seq, "numbered out of order (expected %d)", v.expect)
	}
	if e.Seq > v.expect {
		return v.fail(v.expect, "missing (deleted): the next event stored is %d", e.Seq)
	}
	if e.Tenant != v.tenant {
		return v.fail(e.Seq, "belongs to tenant %q", e.Tenant)
	}
	if got := Hash(e); got != e.Hash {
		return v.fail(e.Seq, "content does not match its hash (edited)")
	}
	if v.known && e.PrevHash != v.prev {
		return v.fail(e.Seq, "prev_hash does not match event %d's hash (event %d or this link was altered)", e.Seq-1, e.Seq-1)
	}
	v.expect, v.prev, v.known = e.Seq+1, e.Hash, true
	v.n++
	return nil
}

// End reports whether the range was whole: every number up to its end
// was seen and, when it ends at the head, the last hash is the head's.
func (v *Verifier) End() error {
	if v.err != nil {
		return v.err
	}
	if v.expect <= v.to {
		return v.fail(v.expect, "missing (deleted): the chain's head is event %d", v.head.Seq)
	}
	if v.n > 0 && v.to == v.head.Seq && v.prev != v.head.Hash {
		return v.fail(v.to, "hash differs from the chain's head (the last event was altered)")
	}
	return nil
}
