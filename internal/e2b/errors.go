package e2b

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/corralhq/corral/internal/e2b/target"
	"github.com/corralhq/corral/internal/fault"
	"github.com/corralhq/corral/internal/validate"
)

// rest is E2B's REST answer to each kind (internal/fault): the statuses
// of E2B's in-sandbox services, but a sandbox lost with its node is 410
// (sandbox_lost), not "not running". It answers the dispatcher's refusals
// too; a sandbox the dispatcher cannot reach is answered as E2B's edge
// proxy answers it (502), not here. A test checks it against fault.Kinds.
var rest = target.Statuses.With(fault.Gone, http.StatusGone)

// answer writes E2B's REST answer to f.
func answer(w http.ResponseWriter, f *fault.Error) { target.Answer(w, rest, f) }

// refuse answers a request E2B's REST API refuses: kind k, saying msg.
func refuse(w http.ResponseWriter, k fault.Kind, msg string) { answer(w, fault.New(k, msg)) }

// fail answers err; an internal error's detail goes to the log.
func (s *Server) fail(w http.ResponseWriter, err error) {
	f := fault.Of(err)
	if f.Kind == fault.Internal {
		s.cfg.Log.Error("e2b: internal error", "err", err)
	}
	answer(w, f)
}

// failCreate answers the error of a create from template: a refusal of
// its image is an unknown template, as E2B says it.
func (s *Server) failCreate(w http.ResponseWriter, err error, template string) {
	if unknownImage(err) {
		refuse(w, fault.NotFound, fmt.Sprintf("template '%s' not found", template))
		return
	}
	s.fail(w, err)
}

// unknownImage reports whether err refuses a create's image (or its
// snapshot): no such template.
func unknownImage(err error) bool {
	var ie *validate.InputError
	if errors.As(err, &ie) && ie.Field == "image" {
		return true
	}
	var f *fault.Error
	return errors.As(err, &f) && f.Kind == fault.NotFound && f.Field == "snapshot_id" ||
		errors.As(err, &ie) && ie.Field == "snapshot_id"
}
