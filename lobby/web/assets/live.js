// Keeps the room page live: on each change notice from the server
// (server-sent events, fed by the room's commits), fetch the page's main
// section again and swap it in. EventSource reconnects by itself and
// sends the last seq it saw, so nothing is missed across a drop.
(function () {
  "use strict";
  var body = document.body, live = document.getElementById("live");
  var room = body.dataset.room, view = body.dataset.view;
  var q = view ? "?view=" + encodeURIComponent(view) : "";
  var shown = body.dataset.seq, pending = false, again = false, ended = false;
  function refresh() {
    if (pending) { again = true; return; }
    pending = true;
    var url = "/rooms/" + encodeURIComponent(room) + (q ? q + "&" : "?") + "part=main";
    fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        var main = document.getElementById("main");
        // What the person is typing survives the swap: field values and
        // the focus (with its caret) are carried over by id.
        var kept = {};
        main.querySelectorAll("input[id]:not([type=hidden]), textarea[id], select[id]").forEach(function (el) {
          if (el.id !== "at") kept[el.id] = el.value;
        });
        var active = document.activeElement, focus = active && active.id, caret = null;
        try { caret = focus ? [active.selectionStart, active.selectionEnd] : null; } catch (e) { caret = null; }
        var folded = {};
        main.querySelectorAll("details[id]").forEach(function (d) { folded[d.id] = d.open; });
        main.innerHTML = html; // server-rendered, escaped by html/template
        Object.keys(folded).forEach(function (id) { var d = document.getElementById(id); if (d) d.open = folded[id]; });
        Object.keys(kept).forEach(function (id) { var el = document.getElementById(id); if (el) el.value = kept[id]; });
        var el = focus && document.getElementById(focus);
        if (el) { el.focus(); if (caret && el.setSelectionRange) try { el.setSelectionRange(caret[0], caret[1]); } catch (e) {} }
        var seq = document.getElementById("seq");
        if (seq) { shown = seq.textContent; body.dataset.seq = shown; }
      })
      .catch(function () { if (!ended) live.textContent = "Could not refresh; retrying on the next change."; })
      .finally(function () { pending = false; if (again) { again = false; refresh(); } });
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
    if (e.target && e.target.id === "at") document.getElementById("at-out").textContent = e.target.value;
  });
  // A page showing the past, or a console result, stays as it is: live
  // refreshes would replace it with the present.
  var params = new URLSearchParams(location.search);
  if (params.has("at") || params.has("eval")) {
    live.textContent = params.has("at") ? "Showing the past; not live." : "Live updates paused while the console shows a result.";
    return;
  }
  var es = new EventSource("/live/rooms/" + encodeURIComponent(room) + q);
  es.addEventListener("open", function () { live.textContent = "Live"; live.className = "live on"; });
  es.addEventListener("error", function () { if (ended) return; live.textContent = "Reconnecting…"; live.className = "live"; });
  es.addEventListener("change", function () { refresh(); });
  // Once the stream says the page can no longer read the room, a refresh
  // that fails after it (the change that ended access) must not replace
  // that with "retrying".
  es.addEventListener("gone", function () { ended = true; es.close(); live.className = "live"; live.textContent = "This room is gone, or this page can no longer read it (you left it, or its view link was replaced)."; });
})();
