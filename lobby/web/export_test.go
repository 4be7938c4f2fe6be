package web

// LiveCounts reports how many times live streams read the room and
// rendered its section so far (livefeed.go shares both between streams).
func LiveCounts(wb *Web) (reads, renders int64) {
	return wb.liveReads.Load(), wb.liveRenders.Load()
}
