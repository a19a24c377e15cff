//go:build linux

package agent

// What a live sandbox's tenant holds in the agent beyond processes ends at
// a reset too, so a pooled sandbox's next tenant inherits none of it.

// endWatches ends every watch, each with KindReset, and returns once each
// has sent its last frame (msgWatchEnd): the host has them before the
// reset's answer.
func (a *Agent) endWatches() {
	s := &a.watches
	s.mu.Lock()
	ended := make([]*watch, 0, len(s.byID))
	for _, w := range s.byID {
		s.end(w, errorReply{Kind: KindReset, Message: "watch: the sandbox was reset"})
		ended = append(ended, w)
	}
	s.mu.Unlock()
	for _, w := range ended {
		<-w.sent
	}
}
