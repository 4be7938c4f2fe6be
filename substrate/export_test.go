package substrate

import "time"

// SetShownWaiting makes f run as soon as a wait has shown its agent
// waiting, before the wait's first read: a test writes there as another
// agent would on seeing the status.
func SetShownWaiting(s *Service, f func(roomID, agentID string)) { s.shownWaiting = f }

// SetWaitSleeps makes f hear how long each check of a wait that did not
// hold lets it sleep before its next re-check.
func SetWaitSleeps(s *Service, f func(roomID string, next time.Duration)) { s.waitSleeps = f }

// GroupQueue says whether a caller of roomID leads a group transaction
// now and how many callers are queued for it: a test starts its callers
// in a known order by waiting for each to be queued, not by sleeping.
func GroupQueue(s *Service, roomID string) (leading bool, queued int) {
	return s.group.Queued(roomID)
}

// SetSearchJudged makes f run once a search has decided what its reader
// may see and before it reads the text it shows (the snippets): a test
// rewrites an entry there as a concurrent writer would.
func SetSearchJudged(s *Service, f func(roomID string)) { s.searchJudged = f }

// SetSearchTimeout replaces the time one search statement may run (3 s):
// a test makes every search too slow.
func SetSearchTimeout(s *Service, d time.Duration) { s.searchTimeout = d }

// SQLUnread and SQLDirectedUnread are a reader's unread count and its
// directed messages' read: an attack test reads what their plans cost.
const (
	SQLUnread         = sqlUnread
	SQLDirectedUnread = sqlDirectedUnread
)
