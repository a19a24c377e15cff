// Package sandbox is the Go client for Corral, a service that runs untrusted,
// model-generated code in isolated, limited sandboxes, and the wire types that
// the server shares with it.
//
// It depends on the standard library only, so an agent that imports it pulls
// in nothing else.
package sandbox
