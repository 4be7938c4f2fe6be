// The loom page without reloads: the tree follows the WAI-ARIA tree
// pattern (arrows, Home/End, Enter), the loom users' hotkeys move and act
// on the node in view, forms answer in place, and the page follows the
// room's changes over the same live stream as the room page. Every link
// and form works without it: this only swaps in what the server renders.
(function () {
  "use strict";
  var body = document.body, live = document.getElementById("live");
  var room = body.dataset.room, view = body.dataset.view;
  var main = document.getElementById("main");
  var busy = false, again = false, ended = false;
  // gen counts the person's own moves and submissions: a live refresh
  // that started before one is stale when it answers, and is dropped.
  var gen = 0, acting = 0;
  // pressed: a pointer is down on the page; a refresh waits for it, or it
  // would replace the element between press and release and lose the
  // click.
  var pressed = false;
  document.addEventListener("pointerdown", function () { pressed = true; }, true);
  function release() { if (!pressed) return; pressed = false; setTimeout(function () { if (again && !busy && !acting) { again = false; refresh(); } }, 50); }
  document.addEventListener("pointerup", release, true);
  document.addEventListener("pointercancel", release, true);

  function partURL(u) { return u + (u.indexOf("?") >= 0 ? "&" : "?") + "part=main"; }
  function say(t) { live.textContent = t; }

  // swap puts server-rendered HTML (escaped by html/template) in main,
  // keeping what the person is typing, what is open and where focus is.
  function swap(html, keepFocus) {
    var kept = {};
    main.querySelectorAll("input[id]:not([type=hidden]):not([type=checkbox]), textarea[id], select[id]").forEach(function (el) { kept[el.id] = el.value; });
    var folded = {};
    main.querySelectorAll("details[id]").forEach(function (d) { folded[d.id] = d.open; });
    var closed = {};
    main.querySelectorAll('[role=treeitem][aria-expanded=false]').forEach(function (li) { if (li.querySelector("ul")) closed[li.id] = true; });
    var active = document.activeElement, focus = active && active.id, caret = null;
    try { caret = focus ? [active.selectionStart, active.selectionEnd] : null; } catch (e) { caret = null; }
    // A live refresh keeps the answer to what the person just ran.
    var ran = keepFocus && document.getElementById("ran");
    var tpl = document.createElement("template");
    tpl.innerHTML = html;
    main.replaceChildren(tpl.content);
    var anchor = main.querySelector("h1 + p");
    if (ran && !document.getElementById("ran") && anchor) anchor.after(ran);
    Object.keys(folded).forEach(function (id) { var d = document.getElementById(id); if (d) d.open = folded[id]; });
    // Items the person closed stay closed, unless that would hide the
    // node in view.
    var sel = main.querySelector("[role=treeitem][aria-selected=true]");
    Object.keys(closed).forEach(function (id) {
      var li = document.getElementById(id);
      if (li && li.querySelector("ul") && !(sel && li !== sel && li.contains(sel))) li.setAttribute("aria-expanded", "false");
    });
    var at = document.getElementById("loom-url");
    if (at) main.dataset.url = at.dataset.url;
    if (keepFocus) {
      Object.keys(kept).forEach(function (id) { var el = document.getElementById(id); if (el && el.type !== "hidden") el.value = kept[id]; });
      var el = focus && document.getElementById(focus);
      if (el) { el.focus({ preventScroll: true }); if (caret && el.setSelectionRange) try { el.setSelectionRange(caret[0], caret[1]); } catch (e) {} }
    }
  }

  function current() { return main.dataset.url || location.pathname + location.search; }

  // go shows another node (or tree, or mode) in place.
  function go(url, focusTree) {
    gen++;
    return fetch(partURL(url), { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) { return r.text().then(function (t) { return { ok: r.ok, t: t }; }); })
      .then(function (res) {
        gen++;
        swap(res.t, false);
        history.pushState({ url: current() }, "", current());
        var sel = main.querySelector('[role=treeitem][aria-selected=true]');
        if (focusTree && sel) { sel.focus({ preventScroll: false }); }
        var h = document.getElementById("h-node");
        if (h) say("Node " + (sel ? sel.dataset.node : "") + " in view");
      })
      .catch(function () { location.href = url; });
  }

  // refresh fetches the page as it is now (a change arrived).
  function refresh() {
    if (busy || acting || pressed) { again = true; return; }
    busy = true;
    var mine = gen;
    var treeFocus = document.activeElement && document.activeElement.getAttribute && document.activeElement.getAttribute("role") === "treeitem" ? document.activeElement.id : null;
    fetch(partURL(current()), { headers: { Accept: "text/html" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok && r.status >= 500) throw new Error(r.status); return r.text(); })
      .then(function (html) {
        if (mine !== gen) { again = true; return; }
        swap(html, true);
        if (treeFocus) { var li = document.getElementById(treeFocus); if (li) { roving(li); li.focus({ preventScroll: true }); } }
        window.__loomShown = Date.now();
        document.dispatchEvent(new CustomEvent("loom:refreshed"));
      })
      .catch(function () { if (!ended) say("Could not refresh; retrying on the next change."); })
      .finally(function () { busy = false; if (again) { again = false; refresh(); } });
  }

  // Forms answer in place: the server runs the command and renders the
  // page where it landed (data-url says where).
  main.addEventListener("submit", function (e) {
    var f = e.target;
    if (!f.classList || !f.classList.contains("lf")) return;
    e.preventDefault();
    var btns = f.querySelectorAll("button");
    btns.forEach(function (b) { b.disabled = true; });
    // A continuation may take the generator a while: say it is running.
    if (f.id === "f-continue") {
      var note = document.createElement("p");
      note.className = "pending";
      note.textContent = "Generating… the continuation shows here when it is written.";
      f.appendChild(note);
      say(note.textContent);
    }
    var data = new URLSearchParams(new FormData(f));
    gen++; acting++;
    fetch(partURL(f.action), { method: "POST", body: data, credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.text(); })
      .then(function (html) {
        gen++;
        swap(html, false);
        var ran = document.getElementById("ran");
        history.replaceState({ url: current() }, "", current());
        if (ran) ran.focus();
        say(ran ? ran.innerText.split("\n").slice(0, 3).join(" ") : "Done");
      })
      .catch(function () { f.submit(); })
      .finally(function () { acting--; if (again && !acting) { again = false; refresh(); } });
  });

  // Links inside main open in place.
  main.addEventListener("click", function (e) {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    var a = e.target.closest && e.target.closest("a[href]");
    if (!a || a.origin !== location.origin || a.pathname !== location.pathname) return;
    e.preventDefault();
    var li = a.closest("[role=treeitem]");
    go(a.getAttribute("href"), !!li);
  });
  window.addEventListener("popstate", function (e) {
    var url = (e.state && e.state.url) || location.pathname + location.search;
    fetch(partURL(url), { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (h) { swap(h, false); });
  });

  // The tree (WAI-ARIA tree pattern) with a roving tabindex.
  function visible() {
    return Array.prototype.filter.call(main.querySelectorAll("[role=treeitem]"), function (li) {
      for (var p = li.parentElement; p && p.getAttribute("role") !== "tree"; p = p.parentElement) {
        if (p.getAttribute("role") === "treeitem" && p.getAttribute("aria-expanded") === "false") return false;
      }
      return true;
    });
  }
  function roving(li) {
    main.querySelectorAll("[role=treeitem][tabindex='0']").forEach(function (x) { x.tabIndex = -1; });
    li.tabIndex = 0;
  }
  function focusItem(li) { if (li) { roving(li); li.focus(); } }
  function parentItem(li) { var p = li.parentElement && li.parentElement.closest("[role=treeitem]"); return p; }
  main.addEventListener("keydown", function (e) {
    var li = e.target;
    if (!li.getAttribute || li.getAttribute("role") !== "treeitem" || e.altKey || e.ctrlKey || e.metaKey) return;
    var items = visible(), i = items.indexOf(li), exp = li.getAttribute("aria-expanded");
    switch (e.key) {
      case "ArrowDown": focusItem(items[i + 1]); break;
      case "ArrowUp": focusItem(items[i - 1]); break;
      case "Home": focusItem(items[0]); break;
      case "End": focusItem(items[items.length - 1]); break;
      case "ArrowRight":
        if (exp === "false") {
          if (li.querySelector("ul")) li.setAttribute("aria-expanded", "true");
          else go(li.dataset.href, true); // folded by the server: open it as the node in view
        } else if (exp === "true") focusItem(li.querySelector("[role=treeitem]"));
        break;
      case "ArrowLeft":
        if (exp === "true") li.setAttribute("aria-expanded", "false");
        else focusItem(parentItem(li));
        break;
      case "Enter": case " ": go(li.dataset.href, true); break;
      default: return;
    }
    e.preventDefault();
  });
  main.addEventListener("focusin", function (e) { if (e.target.getAttribute && e.target.getAttribute("role") === "treeitem") roving(e.target); });

  // The loom users' hotkeys, on the node in view.
  function click(id) { var el = document.getElementById(id); if (el) { el.click(); return true; } return false; }
  function focusField(id) { var el = document.getElementById(id); if (el) { el.scrollIntoView({ block: "center" }); el.focus(); return true; } return false; }
  document.addEventListener("keydown", function (e) {
    var done = false;
    if (e.altKey && !e.ctrlKey && !e.metaKey) {
      switch (e.key) {
        case "ArrowUp": done = click("go-prev"); break;
        case "ArrowDown": done = click("go-next"); break;
        case "ArrowLeft": done = click("go-parent"); break;
        case "ArrowRight": done = click("go-child"); break;
        default:
          switch (e.code) {
            case "KeyB": done = focusField("branch-text"); break;
            case "KeyA": done = focusField("note-text"); break;
            case "KeyK": var f = document.getElementById("f-bookmark"); if (f) { f.requestSubmit(); done = true; } break;
            case "KeyP": done = click("as-prose") || click("as-nodes"); break;
          }
      }
    } else if (e.ctrlKey && !e.altKey && (e.key === " " || e.code === "Space")) {
      var b = document.getElementById("continue-btn");
      if (b && !b.disabled) { b.form.requestSubmit(b); done = true; }
    }
    if (done) e.preventDefault();
  });

  if (history.replaceState) history.replaceState({ url: current() }, "", current());

  // Live: the room's change notices (commits and presence) refresh the page.
  // The stream starts from the seq the page was drawn at, so a commit
  // between the page's read and the stream's start refreshes it at once
  // (without it the stream took the room as it found it for what the page
  // shows, and the page missed that commit until the next one).
  var es = new EventSource("/live/rooms/" + encodeURIComponent(room) + "?seq=" + encodeURIComponent(body.dataset.seq || "0") +
    (view ? "&view=" + encodeURIComponent(view) : ""));
  es.addEventListener("open", function () { say("Live"); live.className = "live on"; });
  es.addEventListener("error", function () { if (ended) return; say("Reconnecting…"); live.className = "live"; });
  es.addEventListener("change", function () { refresh(); });
  es.addEventListener("gone", function () { ended = true; es.close(); live.className = "live"; say("This room is gone, or this page can no longer read it."); });
})();
