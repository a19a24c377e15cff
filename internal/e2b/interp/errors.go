package interp

import (
	"net/http"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
)

// The code interpreter's one error table is E2B's in-sandbox statuses
// (target.Statuses): an unknown context 404, a sandbox gone 502. A
// fault's message is the answer, never text from the sandbox's agent or
// runtime.

// classify is the status and message err is answered with; an internal
// error's detail goes to the log.
func (h *handler) classify(err error) (int, string) {
	f := fault.Of(err)
	if f.Kind == fault.Internal {
		h.log.Error("code interpreter: internal error", "err", err)
	}
	return target.Statuses.Answer(f), f.Message
}

// writeError answers err with E2B's error body.
func (h *handler) writeError(w http.ResponseWriter, err error) {
	status, msg := h.classify(err)
	target.WriteError(w, status, msg)
}

// answer writes the answer to f, a refusal of the code interpreter's own.
func answer(w http.ResponseWriter, f *fault.Error) { target.Answer(w, target.Statuses, f) }

// refuse answers a request the code interpreter refuses: kind k, saying
// msg.
func refuse(w http.ResponseWriter, k fault.Kind, msg string) { answer(w, fault.New(k, msg)) }
