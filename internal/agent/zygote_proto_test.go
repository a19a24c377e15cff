//go:build linux

package agent_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/corralhq/corral/internal/agent"
	"github.com/corralhq/corral/internal/lang"
	"github.com/corralhq/corral/internal/testenv"
)

// pythonProtocol is what corral_proto.py (internal/lang), the zygote
// protocol as Corral's python zygotes speak it, says of the protocol.
type pythonProtocol struct {
	// Keys are its KEY_NAME constants by NAME: message keys.
	Keys       map[string]string `json:"keys"`
	MaxMessage int               `json:"max_message"`
}

// pythonProtocolExpr reads pythonProtocol from corral_proto, as loaded by
// the script it is delivered with.
const pythonProtocolExpr = `(lambda m: {
    'keys': {k[len('KEY_'):]: v for k, v in vars(m).items() if k.startswith('KEY_')},
    'max_message': m.MAX_MESSAGE,
})(sys.modules['corral_proto'])`

// TestPythonZygoteProtocol checks the python zygotes' side of the zygote
// protocol against the agent's, as Go delivers each script (the pool's
// zygote, the context runner): each message key python uses, KEY_NAME, is
// the JSON name of zygoteMsg's field NAME (its name in capitals, without
// underscores), and a request of the largest frame the agent takes fits in
// the message python receives.
func TestPythonZygoteProtocol(t *testing.T) {
	r, ok := lang.Get("python")
	if !ok {
		t.Fatal("no python runner")
	}
	tags := map[string]string{}
	mt := reflect.TypeFor[agent.ZygoteMsg]()
	for i := range mt.NumField() {
		f := mt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		tags[strings.ToUpper(f.Name)] = name
	}
	for _, c := range []struct{ name, program string }{
		{"zygote", r.(lang.Zygoter).ZygoteStep(nil).Argv[2]},
		{"context runner", r.(lang.Contexter).ContextStep().Argv[2]},
	} {
		var p pythonProtocol
		out := testenv.PythonEval(t, c.program, pythonProtocolExpr)
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatalf("%s: %s: %v", c.name, out, err)
		}
		if len(p.Keys) == 0 {
			t.Fatalf("%s: corral_proto has no KEY_ constants: %s", c.name, out)
		}
		for name, key := range p.Keys {
			tag, ok := tags[strings.ReplaceAll(name, "_", "")]
			switch {
			case !ok:
				t.Errorf("%s: corral_proto's KEY_%s = %q names no field of zygoteMsg", c.name, name, key)
			case key != tag:
				t.Errorf("%s: corral_proto's KEY_%s = %q, zygoteMsg's JSON name is %q", c.name, name, key, tag)
			}
		}
		if p.MaxMessage < agent.MaxPayload {
			t.Errorf("%s: corral_proto's MAX_MESSAGE is %d, less than a frame (MaxPayload %d)", c.name, p.MaxMessage, agent.MaxPayload)
		}
	}
}
