package substrate

// SetShownWaiting makes f run as soon as a wait has shown its agent
// waiting, before the wait's first read: a test writes there as another
// agent would on seeing the status.
func SetShownWaiting(s *Service, f func(roomID, agentID string)) { s.shownWaiting = f }
