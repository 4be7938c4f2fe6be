// Keeps the room page live. Each change notice from the server (server-
// sent events, fed by the room's commits) carries what changed on the
// page: patches to the main section (an element found by the nearest id
// and element-child indexes, replaced, inserted or removed), or the whole
// section when that is smaller. Changed elements are highlighted for a
// while, and the live region says in words what happened. EventSource
// reconnects by itself and sends the last seq it saw, so nothing is
// missed across a drop. The same script steps through the past (?at=).
(function () {
  "use strict";
  var body = document.body, live = document.getElementById("live");
  var room = body.dataset.room, view = body.dataset.view;
  var q = view ? "?view=" + encodeURIComponent(view) : "";
  var main = document.getElementById("main");
  var key = "sync.seen." + room;
  var seenBefore = 0;
  try { seenBefore = parseInt(localStorage.getItem(key) || "0", 10) || 0; } catch (e) {}

  // Times are written in UTC by the server; the person reads local time.
  function localTimes(root) {
    root.querySelectorAll("time.local").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) return;
      var today = new Date().toDateString() === d.toDateString();
      t.textContent = (today ? "" : d.toLocaleDateString([], { month: "short", day: "numeric" }) + " ") +
        d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: today ? "2-digit" : undefined });
      t.title = d.toString();
    });
  }
  // Messages that arrived since the person last had this room open are
  // marked new; leaving the page (or hiding it) counts as having looked.
  function markNew(root) {
    root.querySelectorAll("#message-list li[data-seq]").forEach(function (li) {
      if (parseInt(li.dataset.seq, 10) > seenBefore) li.classList.add("new");
    });
  }
  function looked() {
    var max = seenBefore;
    document.querySelectorAll("#message-list li[data-seq]").forEach(function (li) { max = Math.max(max, parseInt(li.dataset.seq, 10) || 0); });
    try { localStorage.setItem(key, String(max)); } catch (e) {}
  }
  document.addEventListener("visibilitychange", function () { if (document.visibilityState === "hidden") looked(); });
  window.addEventListener("pagehide", looked);
  function decorate(root) { localTimes(root); markNew(root); }
  decorate(document);

  // A form says which part of the page it was in, so the answer lands
  // there (the form's feedback shows beside it).
  document.addEventListener("submit", function (e) {
    var f = e.target;
    if (!f || f.method !== "post" || f.querySelector("input[name=from]")) return;
    var holder = f.parentElement && f.parentElement.closest("[id]");
    if (!holder || holder === main) return;
    var i = document.createElement("input");
    i.type = "hidden"; i.name = "from"; i.value = holder.id;
    f.appendChild(i);
  }, true);
  // The answer of the last form: read out, and in view.
  var fb = null;
  if (location.hash.length > 1) { var at = document.getElementById(decodeURIComponent(location.hash.slice(1))); if (at) fb = at.querySelector(".feedback"); }
  fb = fb || document.querySelector(".feedback");
  // A form drawn in a surface shares its action's answer with the
  // action's card: it is shown at the surface used too.
  var used = location.hash.length > 1 && document.getElementById(decodeURIComponent(location.hash.slice(1)));
  if (fb && used && !used.contains(fb)) { var copy = fb.cloneNode(true); used.appendChild(copy); fb = copy; }
  if (fb) { fb.scrollIntoView({ block: "center" }); fb.focus({ preventScroll: true }); }
  // Live updates that land just after (the activity the form itself
  // caused, above it) would push the answer out of view: for a few
  // seconds, until the person scrolls or types, it is kept in view.
  var keepUntil = fb ? Date.now() + 5000 : 0;
  ["wheel", "touchstart", "keydown", "mousedown"].forEach(function (t) { window.addEventListener(t, function () { keepUntil = 0; }, { once: true, passive: true }); });
  // (Layout settling after load, the fragment's own scroll, can move it
  // too: checked a few times a second meanwhile.)
  if (keepUntil) { var keeper = setInterval(function () { if (!keepUntil || Date.now() > keepUntil) clearInterval(keeper); else keepAnswer(); }, 200); }
  function keepAnswer() {
    if (!keepUntil || Date.now() > keepUntil || !fb || !document.contains(fb)) return;
    var r = fb.getBoundingClientRect();
    if (r.top < 0 || r.bottom > innerHeight) fb.scrollIntoView({ block: "center" });
  }

  // Timers count down in place, every second, from the server's expiry
  // time (the page's clock is the person's; a few seconds of skew shows).
  function tick() {
    document.querySelectorAll("time.countdown").forEach(function (el) {
      var left = Math.round((Date.parse(el.getAttribute("datetime")) - Date.now()) / 1000);
      var verb = el.dataset.effect === "enable" ? "enables" : "expires";
      el.textContent = left > 0 ? verb + " in " + (left >= 60 ? Math.floor(left / 60) + "m " : "") + (left % 60) + "s" : (el.dataset.effect === "enable" ? "enabled" : "expired");
    });
  }
  tick();
  setInterval(tick, 1000);
  // The scrubber's label follows the slider.
  document.addEventListener("input", function (e) {
    if (e.target && e.target.id === "at") { var o = document.getElementById("at-out"); if (o) o.textContent = e.target.value; }
  });

  var params = new URLSearchParams(location.search);
  if (body.dataset.at) { past(); return; }
  if (params.has("eval")) { live.textContent = "Live updates paused while the console shows a result."; return; }
  // A page of earlier messages is history: a live update would put the
  // newest back in its place.
  if (params.has("before") || params.has("after")) { live.textContent = "Live updates paused while you read earlier messages."; return; }
  // The internals are sent only to the page that asks for them: a live
  // update, rendered without them, would take them away again.
  if (params.has("internals")) { live.textContent = "Live updates paused while the internals are shown."; return; }

  // What the person is typing, the focus and folded sections survive a
  // replacement of the element holding them.
  function replace(el, html) {
    var kept = {}, folded = {};
    var scope = [el].concat(Array.prototype.slice.call(el.querySelectorAll("[id]")));
    scope.forEach(function (x) {
      if ((x.localName === "input" && x.type !== "hidden") || x.localName === "textarea" || x.localName === "select") {
        if (x.id !== "at") kept[x.id] = x.type === "checkbox" ? x.checked : x.value;
      }
      if (x.localName === "details") folded[x.id] = x.open;
    });
    // A form's answer is the page's, not the room's: the server's render
    // never has it, so it is carried over into the new element.
    var answers = Array.prototype.slice.call(el.querySelectorAll(".feedback")).map(function (a) {
      var h = a.parentElement && a.parentElement.closest("[id]");
      return { el: a, holder: h && h.id, inForm: !!a.closest("form") };
    });
    var active = document.activeElement, focus = el.contains(active) && active.id, caret = null;
    try { caret = focus ? [active.selectionStart, active.selectionEnd] : null; } catch (e) { caret = null; }
    var fresh;
    if (el === main) { main.innerHTML = html; fresh = main; } else {
      el.insertAdjacentHTML("beforebegin", html);
      fresh = el.previousElementSibling;
      el.remove();
    }
    Object.keys(folded).forEach(function (id) { var d = document.getElementById(id); if (d) d.open = folded[id]; });
    Object.keys(kept).forEach(function (id) {
      var x = document.getElementById(id);
      if (!x) return;
      if (x.type === "checkbox") x.checked = kept[id]; else x.value = kept[id];
    });
    answers.forEach(function (a) {
      var h = a.holder && document.getElementById(a.holder);
      if (!h || h.querySelector(".feedback")) return;
      var form = a.inForm && h.querySelector("form");
      (form || h).appendChild(a.el);
    });
    var f = focus && document.getElementById(focus);
    if (f) { f.focus(); if (caret && f.setSelectionRange) try { f.setSelectionRange(caret[0], caret[1]); } catch (e) {} }
    return fresh;
  }
  // A changed element is highlighted with the row, item or card it is
  // part of (not a whole section), for a few seconds.
  function mark(el) {
    if (!el || el === main || el.localName === "time") return;
    var m = el.closest("tr, li, .surface, article, dd") || el;
    if (m === main || m.localName === "section") return;
    m.classList.remove("changed");
    void m.offsetWidth; // restart the highlight's animation
    m.classList.add("changed");
    setTimeout(function () { m.classList.remove("changed"); }, 6000);
  }
  function find(p) {
    var el = p.id ? document.getElementById(p.id) : main;
    if (!el || !main.contains(el)) return null;
    (p.path || []).forEach(function (i) { el = el && el.children[i]; });
    return el && el.localName === p.tag ? el : null;
  }
  function apply(ps) {
    var fresh = [];
    for (var i = 0; i < ps.length; i++) {
      var p = ps[i], el = find(p);
      if (!el) return false;
      if (p.op === "remove") { el.remove(); continue; }
      if (p.op === "insert") {
        var before = p.before ? document.getElementById(p.before) : null;
        if (p.before && (!before || before.parentElement !== el)) return false;
        if (before) { before.insertAdjacentHTML("beforebegin", p.html); fresh.push(before.previousElementSibling); }
        else { el.insertAdjacentHTML("beforeend", p.html); fresh.push(el.lastElementChild); }
        continue;
      }
      fresh.push(replace(el, p.html));
    }
    fresh.forEach(function (el) { if (el) { decorate(el.parentElement || el); mark(el); } });
    return true;
  }
  // The whole section again (the fallback when the page's tree is not
  // the one the patches were made for).
  var pending = false, again = false, ended = false;
  function refresh() {
    if (pending) { again = true; return; }
    pending = true;
    var url = "/rooms/" + encodeURIComponent(room) + (q ? q + "&" : "?") + "part=main" + tables;
    fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) { replace(main, html); decorate(main); keepAnswer(); })
      .catch(function () { if (!ended) say("Could not refresh; retrying on the next change."); })
      .finally(function () { pending = false; if (again) { again = false; refresh(); } });
  }
  // The live region says what changed, at most every 2 s (a busy room
  // would otherwise talk over itself).
  var said = 0, queued = [], timer = null;
  function say(text) { live.textContent = text; said = Date.now(); }
  function tell(summary) {
    queued.push(summary);
    if (timer) return;
    timer = setTimeout(function () {
      timer = null;
      var n = queued.length, last = queued[n - 1];
      queued = [];
      say(n > 1 ? "Live · " + n + " updates; latest: " + last : "Live · " + last);
    }, Math.max(0, 2000 - (Date.now() - said)));
  }
  window.__live = { events: 0, bytes: 0, full: 0 };
  // The tables' pages and filters the page asks for (?tp.<view>=,
  // ?tq.<view>=): the live section shows the same ones.
  var tables = "";
  new URLSearchParams(location.search).forEach(function (v, k) {
    if (/^t[pq]\./.test(k)) tables += "&" + encodeURIComponent(k) + "=" + encodeURIComponent(v);
  });
  var es = new EventSource("/live/rooms/" + encodeURIComponent(room) + (q ? q + "&" : "?") + "seq=" + encodeURIComponent(body.dataset.seq || "0") + tables +
    // When what the page shows next changes with no write: a stream that
    // starts past it sends the section even at the same seq.
    (body.dataset.until ? "&until=" + encodeURIComponent(body.dataset.until) : ""));
  es.addEventListener("open", function () { if (!said) say("Live"); live.className = "live on"; });
  es.addEventListener("error", function () { if (ended) return; say("Reconnecting…"); live.className = "live"; });
  es.addEventListener("change", function (e) {
    window.__live.events++; window.__live.bytes += e.data.length; window.__live.last = e.data;
    var ev;
    try { ev = JSON.parse(e.data); } catch (x) { refresh(); return; }
    if (ev.html !== undefined && ev.html !== "") { window.__live.full++; replace(main, ev.html); decorate(main); }
    else if (!apply(ev.patches || [])) refresh();
    keepAnswer();
    body.dataset.seq = String(ev.seq);
    if (ev.summary) tell(ev.summary);
  });
  // Once the stream says the page can no longer read the room, a refresh
  // that fails after it (the change that ended access) must not replace
  // that with "retrying".
  es.addEventListener("gone", function () { ended = true; es.close(); live.className = "live"; say("This room is gone, or this page can no longer read it (you left it, or its view link was replaced)."); });

  // The past, step by step: the arrow keys step, Play steps on every
  // 1.5 s until now or Pause.
  function past() {
    var play = document.getElementById("play"), back = document.getElementById("step-back"), fwd = document.getElementById("step-forward");
    var playing = play && play.dataset.playing === "1", t = null;
    function go(a, keep) { if (a) location.href = a.href + (keep ? "&play=1" : ""); }
    if (play) {
      play.hidden = false;
      play.addEventListener("click", function () {
        playing = !playing;
        play.textContent = playing ? "Pause" : "Play";
        if (playing) t = setTimeout(function () { go(fwd, true); }, 300); else clearTimeout(t);
      });
      if (playing && fwd) t = setTimeout(function () { go(fwd, true); }, 1500);
      else if (playing) { play.textContent = "Play"; playing = false; }
    }
    document.addEventListener("keydown", function (e) {
      var tag = e.target && e.target.localName;
      if (tag === "input" || tag === "textarea" || e.altKey || e.ctrlKey || e.metaKey) return;
      if (e.key === "ArrowLeft") go(back, false);
      if (e.key === "ArrowRight") go(fwd, false);
    });
  }
})();
