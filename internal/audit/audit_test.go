package audit

import (
	"errors"
	"testing"
	"time"
)

// chain seals n events of tenant t as a store would.
func chain(t string, n int) ([]Event, Head) {
	var h Head
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{Tenant: t, Time: time.Unix(1700000000, int64(i)*1500).UTC(), KeyID: "k", Action: FileWrite,
			Fields: map[string]string{"path": "/workspace/a", "size": "3"}}
		h.Seq, h.Hash = Seal(&out[i], h.Seq, h.Hash)
	}
	return out, h
}

func verify(events []Event, h Head, from, to int64) error {
	v := NewVerifier("acme", h, from, to)
	for i := range events {
		if err := v.Next(&events[i]); err != nil {
			return err
		}
	}
	return v.End()
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(es []Event, h *Head) []Event
		from    int64
		wantSeq int64 // 0: the chain holds
	}{
		{"intact", func(es []Event, h *Head) []Event { return es }, 0, 0},
		{"edited field", func(es []Event, h *Head) []Event { es[2].Fields["path"] = "/etc/x"; return es }, 0, 3},
		{"edited and rehashed", func(es []Event, h *Head) []Event {
			es[2].KeyID = "other"
			es[2].Hash = Hash(&es[2])
			return es
		}, 0, 4},
		{"deleted", func(es []Event, h *Head) []Event { return append(es[:1], es[2:]...) }, 0, 2},
		{"first deleted", func(es []Event, h *Head) []Event { return es[1:] }, 0, 1},
		{"last deleted", func(es []Event, h *Head) []Event { return es[:4] }, 0, 5},
		{"last edited", func(es []Event, h *Head) []Event { es[4].Action = "x"; return es }, 0, 5},
		{"pruned, then intact", func(es []Event, h *Head) []Event { h.Pruned = 2; return es[2:] }, 0, 0},
		{"range in the middle", func(es []Event, h *Head) []Event { return es[1:3] }, 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, h := chain("acme", 5)
			es = tt.tamper(es, &h)
			to := int64(0)
			if tt.name == "range in the middle" {
				to = 3
			}
			err := verify(es, h, tt.from, to)
			var b *Broken
			switch {
			case tt.wantSeq == 0 && err != nil:
				t.Fatalf("verify: %v, want the chain to hold", err)
			case tt.wantSeq != 0 && !errors.As(err, &b):
				t.Fatalf("verify: %v, want a broken link at %d", err, tt.wantSeq)
			case tt.wantSeq != 0 && b.Seq != tt.wantSeq:
				t.Fatalf("broken at %d (%s), want %d", b.Seq, b.Reason, tt.wantSeq)
			}
		})
	}
}

// TestCanonical pins the encoding docs/audit.md describes: a verifier in
// another language reproduces these bytes.
func TestCanonical(t *testing.T) {
	e := Event{Tenant: "acme", Seq: 2, Time: time.UnixMicro(1700000000123456), KeyID: "ab12", Node: "n1",
		SandboxID: "sb", Action: ProcessStart, Outcome: OK, Fields: map[string]string{"z": "<&>", "argv": `["ls"]`},
		PrevHash: "00"}
	Clean(&e)
	want := "corral-audit-v1\n" + `["acme",2,1700000000123456,"ab12","n1","sb","","process.start","ok","",[["argv","[\"ls\"]"],["z","<&>"]],"00"]`
	if got := string(Canonical(&e)); got != want {
		t.Fatalf("canonical:\n got %s\nwant %s", got, want)
	}
}

func TestCleanCuts(t *testing.T) {
	long := make([]byte, MaxField+10)
	for i := range long {
		long[i] = 'a'
	}
	e := Event{Error: string(long) + "\x00", Fields: map[string]string{"bad": "\xff"}}
	Clean(&e)
	if len(e.Error) > MaxField+16 || e.Fields["bad"] != "\uFFFD" {
		t.Fatalf("clean: error %d bytes, field %q", len(e.Error), e.Fields["bad"])
	}
}
