package web

import "github.com/syncsubstrate/sync/substrate/activity"

// LiveCounts reports how many times live streams read the room and
// rendered its section so far (livefeed.go shares both between streams).
func LiveCounts(wb *Web) (reads, renders int64) {
	return wb.liveReads.Load(), wb.liveRenders.Load()
}

// LiveFeeds reports the rooms followed live and the renders their feeds
// hold (reads and sections of the current epoch).
func LiveFeeds(wb *Web) (feeds, renders int) {
	wb.mu.Lock()
	fs := make([]*feed, 0, len(wb.feeds))
	for _, f := range wb.feeds {
		fs = append(fs, f)
	}
	wb.mu.Unlock()
	for _, f := range fs {
		f.mu.Lock()
		renders += len(f.reads) + len(f.pages)
		f.mu.Unlock()
	}
	return len(fs), renders
}

// LiveSettled reports how many live streams got past their first section
// so far, and how many wakes (after a change) streams have not yet
// answered: none means no live render is under way or due.
func LiveSettled(wb *Web) (started, unsent int64) {
	wb.mu.Lock()
	fs := make([]*feed, 0, len(wb.feeds))
	for _, f := range wb.feeds {
		fs = append(fs, f)
	}
	wb.mu.Unlock()
	for _, f := range fs {
		unsent += f.unsent.Load()
	}
	return wb.liveStarted.Load(), unsent
}

// Describe is an audit entry as the activity feed says it, knowing no
// names: the actor, the sentence and the keys it names.
func Describe(a activity.Activity) (by, what string, keys []string) {
	r := activityOf(a, nil)
	return r.By, r.What, r.Keys
}
