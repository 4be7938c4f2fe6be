package web_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/syncsubstrate/sync/lobby/teamroom"
	"github.com/syncsubstrate/sync/lobby/web"
	"github.com/syncsubstrate/sync/substrate"
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
	// A page drawn without the reader's query (the answer to a token
	// rotation) shows the first page.
	if code, page := s.post("maya", "/web/rooms/"+room.ID+"/tokens/rotate", url.Values{"which": {"room"}}); code != 200 || !strings.Contains(tableOf(t, page, "task_table"), "rows 1–50 of 60") {
		t.Errorf("the rotation's page (%d) draws no table:\n%s", code, tableOf(t, page, "task_table"))
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

// Refusals the page can explain (issue 42 bug 8): a precondition names
// its false clause and what it read, a cooldown the time left; a refused
// form shows what was typed again; an enum param is offered as choices.
func TestRefusalsSayWhyAndKeepWhatWasTyped(t *testing.T) {
	s, room := newTeamSite(t, web.Options{})
	path := "/web/rooms/" + room.ID + "/invoke/"
	// The false clause, said as it is (no sentence reads it).
	_, _, page := s.postFollow("maya", path+"ship", url.Values{})
	if want := `You can&#39;t ship right now: it needs size(state._shared.tasks.filter(t, t.status != &#34;done&#34;)) == 0, which is not the case`; !strings.Contains(page, want) {
		t.Errorf("the ship refusal does not name its clause: %s", feedbackOf(page))
	}
	// The cooldown's time left (ops deployed the preview while the room
	// was built: some 10 minutes).
	_, _, page = s.postFollow("maya", path+"deploy_preview", url.Values{})
	if fb := feedbackOf(page); !strings.Contains(fb, "deploy_preview is cooling down: it can be used again in 9m") && !strings.Contains(fb, "deploy_preview is cooling down: it can be used again in 10m") {
		t.Errorf("the cooldown refusal does not say the time left: %s", fb)
	}
	// A refused form keeps what was typed; the enum is a select.
	_, _, page = s.postFollow("maya", path+"note", url.Values{"p.text": {"Keep THIS text"}, "t.text": {"string"}, "p.kind": {"rumour"}, "t.kind": {"string"}})
	if fb := feedbackOf(page); !strings.Contains(fb, "Please check the form") {
		t.Errorf("the note with a kind not offered was not refused: %s", fb)
	}
	form := formOf(t, page, "note")
	if !strings.Contains(form, `name="p.text" type="text" required value="Keep THIS text"`) {
		t.Errorf("the refused form lost what was typed:\n%s", form)
	}
	for _, want := range []string{`<select id="p-note-kind" name="p.kind" required>`, `<option value="decision">decision</option>`, `<option value="idea">idea</option>`} {
		if !strings.Contains(form, want) {
			t.Errorf("the note form lacks %q:\n%s", want, form)
		}
	}
	// The choice made survives a refusal too.
	_, _, page = s.postFollow("maya", path+"note", url.Values{"p.text": {""}, "t.text": {"string"}, "p.kind": {"risk"}, "t.kind": {"string"}})
	if form := formOf(t, page, "note"); !strings.Contains(form, `<option value="risk" selected>risk</option>`) {
		t.Errorf("the refused form lost the choice made:\n%s", form)
	}
}

// A refused message keeps its text in the box.
func TestRefusedMessageKeepsItsText(t *testing.T) {
	s := newSiteLimits(t, web.Options{}, substrate.Limits{MaxValueBytes: 300}, "alice")
	body := strings.Repeat("a long message that the room refuses ", 10)
	_, _, page := s.postFollow("alice", "/web/rooms/lab/message", url.Values{"body": {body}})
	if !strings.Contains(feedbackOf(page), "That did not work") && !strings.Contains(feedbackOf(page), "check") {
		t.Fatalf("the message was not refused: %s", feedbackOf(page))
	}
	if !strings.Contains(page, `name="body" type="text" required maxlength="4000" value="`+body+`"`) {
		t.Errorf("the refused message is not in the box again: %s", page[strings.Index(page, `id="compose"`):][:300])
	}
}

// feedbackOf is the page's answer to the last form (or "").
func feedbackOf(page string) string {
	i := strings.Index(page, `<div class="feedback`)
	if i < 0 {
		return ""
	}
	rest := page[i:]
	if j := strings.Index(rest, "</div>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// formOf is the Actions section's form of action id.
func formOf(t testing.TB, page, id string) string {
	t.Helper()
	i := strings.Index(page, `action="/web/rooms/launch/invoke/`+id+`" class="invoke"`)
	if i < 0 {
		t.Fatalf("the page has no form for %s", id)
	}
	rest := page[i:]
	if j := strings.Index(rest, "</form>"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// The present list tells namesakes apart (issue 42 bug 10): maya's web
// agent and her model's agent are both named "maya"; the lobby's share
// form offers participant first, as the account page does.
func TestPresentListTellsNamesakesApart(t *testing.T) {
	s, room := newTeamSite(t, web.Options{})
	_, _, page := s.get("raj", "/rooms/"+room.ID)
	i := strings.Index(page, `<div id="summary-present">`)
	if i < 0 {
		t.Fatal("no present list")
	}
	present := page[i : i+strings.Index(page[i:], "</div>")]
	for _, want := range []string{`maya <span class="muted">(web)</span>`, `maya <span class="muted">(claude-ai)</span>`, "Ada Planner"} {
		if !strings.Contains(present, want) {
			t.Errorf("the present list lacks %q: %s", want, present)
		}
	}
	if strings.Contains(present, "maya, maya") {
		t.Errorf("the present list names maya twice alike: %s", present)
	}
	if _, _, lobby := s.get("maya", "/"); !strings.Contains(lobby, `name="access"><option selected>participant</option>`) {
		t.Error("the lobby's share form does not offer participant first")
	}
}
