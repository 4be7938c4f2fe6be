package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/teamroom"
	"github.com/syncsubstrate/sync/lobby/web"
)

// newTeamSite is the pages over the real-size room (lobby/teamroom),
// "launch", owned by maya and shared with raj; alice's "lab" is there too,
// as newSite makes it.
func newTeamSite(t testing.TB, opt web.Options) (*site, *teamroom.Room) {
	t.Helper()
	s := newSiteTB(t, opt, "alice", "maya", "raj")
	room, err := teamroom.Build(context.Background(), s.svc, s.lob, teamroom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s, room
}

// tableOf is the table surface id's part of a room page: its heading,
// filter, count, rows and pager (up to the next surface).
func tableOf(t testing.TB, page, id string) string {
	t.Helper()
	start := strings.Index(page, `id="surface-`+id+`"`)
	if start < 0 {
		t.Fatalf("the page has no surface %s", id)
	}
	rest := page[start:]
	if end := strings.Index(rest[1:], `<div class="surface `); end >= 0 {
		rest = rest[:end+1]
	}
	return rest
}

// A table of 60 rows says 60 and shows them a page at a time, by links
// that work without a script; its filter searches every row on the
// server, so a task past the first 50 is found (issue 42 bug 2: the
// table said "(50)" and its filter searched those 50).
func TestTableSurfacePagesAndFiltersEveryRow(t *testing.T) {
	s, room := newTeamSite(t, web.Options{})
	_, _, page := s.get("maya", "/rooms/"+room.ID)
	table := tableOf(t, page, "task_table")
	for _, want := range []string{"task_table <span class=\"muted\">(60)</span>", "rows 1–50 of 60", "Page 1 of 2", `href="?tp.task_table=2#surface-task_table"`} {
		if !strings.Contains(table, want) {
			t.Errorf("page 1 of the table lacks %q", want)
		}
	}
	if n := strings.Count(table, "<tr id="); n != 50 {
		t.Errorf("page 1 shows %d rows, want 50", n)
	}
	if strings.Contains(table, teamroom.DeepTaskTitle) {
		t.Errorf("page 1 shows %s, row 57", teamroom.DeepTask)
	}
	_, _, page = s.get("maya", "/rooms/"+room.ID+"?tp.task_table=2")
	table = tableOf(t, page, "task_table")
	if n := strings.Count(table, "<tr id="); n != 10 || !strings.Contains(table, teamroom.DeepTaskTitle) || !strings.Contains(table, "rows 51–60 of 60") || !strings.Contains(table, `rel="prev"`) {
		t.Errorf("page 2 shows %d rows (want 10, with %s):\n%s", n, teamroom.DeepTask, table)
	}
	// The filter: a GET form, answered by the server over all 60 rows.
	if !strings.Contains(table, `<form method="get" action="#surface-task_table"`) || !strings.Contains(table, `name="tq.task_table"`) {
		t.Errorf("the table's filter is not a form the server answers:\n%s", table)
	}
	_, _, page = s.get("maya", "/rooms/"+room.ID+"?tq.task_table="+url.QueryEscape("payment provider KEYS"))
	table = tableOf(t, page, "task_table")
	if n := strings.Count(table, "<tr id="); n != 1 || !strings.Contains(table, teamroom.DeepTaskTitle) || !strings.Contains(table, "1 of 60 match") || !strings.Contains(table, "Show all") {
		t.Errorf("filtering for row 57 shows %d rows:\n%s", n, table)
	}
	// A view link's token rides along on the pager's links.
	_, _, page = s.get("", "/rooms/"+room.ID+"?view="+room.ViewToken)
	if table = tableOf(t, page, "task_table"); !strings.Contains(table, `href="?tp.task_table=2&amp;view=`+url.QueryEscape(room.ViewToken)) {
		t.Errorf("the view link's pager drops the token:\n%s", table)
	}
}

// The live section shows the table's page the page asked for: a stream
// opened with ?tp.<view>= renders that page, and one without, the first
// (their renders are not shared).
func TestLiveSectionKeepsTheTablesPage(t *testing.T) {
	s, room := newTeamSite(t, web.Options{})
	second := s.stream("maya", "/live/rooms/"+room.ID+"?seq=0&tp.task_table=2", "")
	first := s.stream("maya", "/live/rooms/"+room.ID+"?seq=0", "")
	for name, c := range map[string]struct {
		ev        <-chan string
		want, not string
	}{"page 2": {second, "rows 51–60 of 60", "rows 1–50 of 60"}, "page 1": {first, "rows 1–50 of 60", "rows 51–60 of 60"}} {
		select {
		case ev := <-c.ev:
			if !strings.Contains(ev, c.want) || strings.Contains(ev, c.not) {
				t.Errorf("the %s stream's section lacks %q (or holds %q)", name, c.want, c.not)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the %s stream sent nothing", name)
		}
	}
}
