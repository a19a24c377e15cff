package envd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// jsonCodec is the Connect codec "json" over the hand-written messages:
// encoding/json, with the proto3 JSON forms the message types implement.
// Unknown fields are ignored (as proto3 JSON readers do); a body that is
// not one JSON object, or has anything after it, is an error (connect
// answers it invalid_argument).
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

// jsonUTF8 is the JSON codec under the name connect gives
// "application/json; charset=utf-8" (its default for that name is
// protobuf's JSON, which the hand-written messages are not).
type jsonUTF8 struct{ jsonCodec }

func (jsonUTF8) Name() string { return "json; charset=utf-8" }

// IsBinary tells connect the codec writes text.
func (jsonCodec) IsBinary() bool { return false }

func (jsonCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encode %T: %w", v, err)
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	// An empty body is the empty message (proto3 JSON readers accept it
	// from clients that send nothing for one).
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if t := bytes.TrimSpace(data); t[0] != '{' {
		return errors.New("the message is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("the message is not valid JSON for %s: %w", messageName(v), err)
	}
	if dec.More() {
		return errors.New("the message has data after its JSON object")
	}
	if _, err := dec.Token(); err == nil {
		return errors.New("the message has data after its JSON object")
	}
	return nil
}

// protoRefused stands in for connect's binary codec "proto": this server
// speaks only the JSON codec, and says so.
type protoRefused struct{}

var errBinary = errors.New("this server speaks the Connect protocol with the JSON codec only (application/json, application/connect+json)")

func (protoRefused) Name() string                { return "proto" }
func (protoRefused) Marshal(any) ([]byte, error) { return nil, errBinary }
func (protoRefused) Unmarshal([]byte, any) error { return errBinary }

func messageName(v any) string {
	return fmt.Sprintf("%T", v)
}
