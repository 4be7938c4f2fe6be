// The room page's own behaviour, beside the live updates (live.js):
// tables a person can sort and filter, and the live line shown only when
// a script runs to keep it true. Everything works from event delegation
// and is re-applied after each live update, whatever it replaced.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (live) live.hidden = false;

  // Sort and filter state per table id, kept across live updates.
  var sorts = {}, filters = {};

  function cellText(row, i) {
    var c = row.cells[i];
    return c ? c.textContent.trim() : "";
  }
  function compare(a, b) {
    var x = parseFloat(a), y = parseFloat(b);
    if (!isNaN(x) && !isNaN(y) && String(x) === a && String(y) === b) return x - y;
    return a.localeCompare(b, undefined, { numeric: true, sensitivity: "base" });
  }
  function applySort(table) {
    var s = sorts[table.id];
    var ths = table.tHead ? table.tHead.rows[0].cells : [];
    for (var i = 0; i < ths.length; i++) ths[i].setAttribute("aria-sort", s && s.col === i ? (s.dir > 0 ? "ascending" : "descending") : "none");
    if (!s || !table.tBodies[0]) return;
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) { return s.dir * compare(cellText(a, s.col), cellText(b, s.col)); });
    var sorted = rows.every(function (r, i) { return body.rows[i] === r; });
    if (!sorted) rows.forEach(function (r) { body.appendChild(r); });
  }
  function applyFilter(table) {
    var f = (filters[table.id] || "").toLowerCase(), shown = 0;
    if (!table.tBodies[0]) return;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      var hide = f !== "" && r.textContent.toLowerCase().indexOf(f) < 0;
      if (r.hidden !== hide) r.hidden = hide;
      if (!hide) shown++;
    });
    var out = document.getElementById(table.id + "-count");
    if (out) {
      var text = f ? shown + " of " + table.tBodies[0].rows.length + " rows" : "";
      if (out.textContent !== text) out.textContent = text;
    }
  }
  // enhance turns each sortable table's headers into sort buttons and
  // shows its filter field; idempotent, so it runs after every update.
  function enhance() {
    document.querySelectorAll("table.sortable[id]").forEach(function (table) {
      var head = table.tHead && table.tHead.rows[0];
      if (head) Array.prototype.forEach.call(head.cells, function (th, i) {
        if (th.querySelector("button.sort")) return;
        var b = document.createElement("button");
        b.type = "button"; b.className = "sort"; b.dataset.col = i;
        b.textContent = th.textContent;
        th.textContent = ""; th.appendChild(b);
      });
      var input = document.getElementById(table.id + "-filter");
      if (input && input.parentNode.hidden) input.parentNode.hidden = false;
      if (input && input.value !== (filters[table.id] || "")) filters[table.id] = input.value;
      applySort(table);
      applyFilter(table);
    });
  }
  document.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("button.sort");
    if (!b) return;
    var table = b.closest("table"), col = +b.dataset.col, s = sorts[table.id];
    sorts[table.id] = { col: col, dir: s && s.col === col ? -s.dir : 1 };
    applySort(table);
  });
  document.addEventListener("input", function (e) {
    var t = e.target;
    if (!t || !t.dataset || !t.dataset.filter) return;
    filters[t.dataset.filter] = t.value;
    var table = document.getElementById(t.dataset.filter);
    if (table) applyFilter(table);
  });
  // Messages new since the person last had this room open (the newest
  // seq they saw, kept in this browser: live.js marks the same messages
  // new): counted in the header, and leaving the page counts as looking.
  var seenKey = "sync.seen." + document.body.dataset.room, seen = 0;
  try { seen = parseInt(localStorage.getItem(seenKey) || "0", 10) || 0; } catch (e) {}
  function seqs() {
    return Array.prototype.map.call(document.querySelectorAll("#message-list li[data-seq]"), function (li) { return parseInt(li.dataset.seq, 10) || 0; });
  }
  function unread() {
    var el = document.getElementById("summary-new");
    if (!el) return;
    var list = document.getElementById("messages-shown"), all = seqs();
    var n = all.filter(function (s) { return s > seen; }).length, more = "";
    if (list && list.dataset.page === "earlier") n = 0; // history, not news
    // The list is a page of the log: when the new ones reach back past
    // its start, the whole room's count says how many (a first visit:
    // all of them), or the page says at least.
    var older = list && parseInt(list.dataset.older || "0", 10);
    if (older && n === all.length) {
      if (!seen) n = parseInt(list.dataset.total || "0", 10) || n; else more = " or more";
    }
    var text = n ? " · " + n + more + " new since you last looked" : "";
    if (el.textContent !== text) el.textContent = text;
    if (el.hidden !== !n) el.hidden = !n;
  }
  function looked() {
    var max = Math.max.apply(null, [seen].concat(seqs()));
    try { localStorage.setItem(seenKey, String(max)); } catch (e) {}
  }
  document.addEventListener("visibilitychange", function () { if (document.visibilityState === "hidden") looked(); });
  window.addEventListener("pagehide", looked);

  // A link into a folded section (#state, a scope's entry, a log) opens
  // the folds on its way, and the section's own fold when it names the
  // section: a folded target is not where the browser can scroll to.
  function unfold() {
    if (location.hash.length < 2) return;
    var el = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (!el) return;
    var own = el.querySelector(":scope > details.fold"), opened = false;
    if (own && !own.open) { own.open = true; opened = true; }
    for (var d = el.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) {
      if (!d.open) { d.open = true; opened = true; }
    }
    if (opened) el.scrollIntoView();
  }
  unfold();
  window.addEventListener("hashchange", unfold);
  // The message list scrolls in its own box, newest last: it opens at the
  // newest, and stays there as messages arrive unless the person has
  // scrolled up to read.
  var atEnd = true;
  function toEnd() {
    var list = document.getElementById("message-list");
    if (list && atEnd && list.scrollHeight > list.clientHeight) list.scrollTop = list.scrollHeight;
  }
  document.addEventListener("scroll", function (e) {
    if (e.target && e.target.id === "message-list") atEnd = e.target.scrollTop + e.target.clientHeight >= e.target.scrollHeight - 8;
  }, true);
  if (!document.body.dataset.at && !document.querySelector("#messages-shown[data-page=earlier]")) toEnd();

  function refreshed() { enhance(); unread(); toEnd(); }
  refreshed();
  var main = document.getElementById("main"), busy = false;
  if (main && window.MutationObserver) new MutationObserver(function (records) {
    // The countdowns' ticks (text in <time>) change no table.
    if (busy || records.every(function (r) { return r.target.nodeName === "TIME"; })) return;
    busy = true;
    try { refreshed(); } finally { busy = false; }
  }).observe(main, { childList: true, subtree: true });
})();
