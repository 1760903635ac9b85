// Queue (DLQ triage) pages: row selection (checkbox, select page, shift-click range) and the keyboard
// (j/k move, x select, r retry, d purge with confirmation, Enter/o open, / search); app.js opens the ? help.
// No inline scripts (strict CSP): everything is bound here, by delegation, so it survives htmx swaps.
(function () {
  "use strict";
  var lastChecked = null;

  function rows() { return Array.prototype.slice.call(document.querySelectorAll("#results tr[data-job]")); }
  function current() { return document.querySelector("#results tr.current"); }
  function checkOf(row) { return row && row.querySelector("input[data-row-check]"); }

  function refreshSelection() {
    var checks = document.querySelectorAll("#results input[data-row-check]");
    var n = 0;
    checks.forEach(function (c) {
      var row = c.closest("tr");
      if (row) { row.classList.toggle("selected", c.checked); }
      if (c.checked) { n += 1; }
    });
    var label = document.querySelector("[data-selected-count]");
    if (label) { label.textContent = n + " selected"; }
    document.querySelectorAll("[data-needs-selection]").forEach(function (b) { b.disabled = n === 0; });
    var all = document.querySelector("input[data-select-page]");
    if (all) { all.checked = n > 0 && n === checks.length; all.indeterminate = n > 0 && n < checks.length; }
  }

  function setCurrent(row) {
    rows().forEach(function (r) { r.classList.remove("current"); });
    if (row) {
      row.classList.add("current");
      row.scrollIntoView({ block: "nearest" });
    }
  }

  function move(step) {
    var list = rows();
    if (!list.length) { return; }
    var i = list.indexOf(current());
    var next = i < 0 ? (step > 0 ? 0 : list.length - 1) : Math.min(list.length - 1, Math.max(0, i + step));
    setCurrent(list[next]);
  }

  document.addEventListener("click", function (evt) {
    var target = evt.target;
    if (!(target instanceof Element)) { return; }
    // Buttons carrying data-confirm (row purge) ask first; forms with data-confirm are app.js's.
    var confirmButton = target.closest("button[data-confirm]");
    if (confirmButton && !window.confirm(confirmButton.getAttribute("data-confirm"))) {
      evt.preventDefault();
      evt.stopImmediatePropagation();
      return;
    }
    if (target.matches("input[data-select-page]")) {
      document.querySelectorAll("#results input[data-row-check]").forEach(function (c) { c.checked = target.checked; });
      refreshSelection();
      return;
    }
    if (target.matches("input[data-row-check]")) {
      if (evt.shiftKey && lastChecked && lastChecked !== target) {
        var checks = Array.prototype.slice.call(document.querySelectorAll("#results input[data-row-check]"));
        var a = checks.indexOf(lastChecked), b = checks.indexOf(target);
        if (a >= 0 && b >= 0) {
          checks.slice(Math.min(a, b), Math.max(a, b) + 1).forEach(function (c) { c.checked = target.checked; });
        }
      }
      lastChecked = target;
      setCurrent(target.closest("tr"));
      refreshSelection();
    }
  });

  document.addEventListener("htmx:afterSwap", function () { lastChecked = null; refreshSelection(); });

  // The tab badges are polled; the rows are not (a refresh under the cursor would lose it). When the
  // open tab's count changes, a hint offers the refresh instead.
  var shownCount = null;
  function activeCount() {
    var badge = document.querySelector("#tabs a[aria-current=page] [data-count]");
    return badge ? badge.textContent.replace(/[^0-9]/g, "") : null;
  }
  document.addEventListener("DOMContentLoaded", function () { shownCount = activeCount(); });
  document.addEventListener("htmx:afterSettle", function (evt) {
    var target = evt.detail && evt.detail.elt;
    if (target && target.id === "results") { shownCount = activeCount(); }
    var hint = document.getElementById("new-rows");
    var now = activeCount();
    if (!hint || now === null || shownCount === null) { return; }
    var changed = now !== shownCount;
    hint.classList.toggle("hidden", !changed);
    if (changed) {
      var diff = parseInt(now, 10) - parseInt(shownCount, 10);
      hint.querySelector("[data-new-text]").textContent = diff > 0
        ? diff + " new since the list was loaded —"
        : (-diff) + " fewer since the list was loaded —";
    }
  });
  document.addEventListener("DOMContentLoaded", refreshSelection);

  function typing(evt) {
    var t = evt.target;
    return t instanceof Element && (t.closest("input, textarea, select, [contenteditable]") !== null);
  }

  // After a row's retry or purge the page reloads without that row: the cursor comes back at the same
  // position (the next job) instead of starting over at the top.
  function rememberCursor() {
    var i = rows().indexOf(current());
    if (i >= 0 && window.sessionStorage) { window.sessionStorage.setItem("queue-cursor", String(i)); }
  }
  document.addEventListener("submit", function (evt) {
    var submitter = evt.submitter;
    if (submitter && (submitter.hasAttribute("data-row-retry") || submitter.hasAttribute("data-row-purge"))) {
      setCurrent(submitter.closest("tr"));
      rememberCursor();
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    var saved = window.sessionStorage ? window.sessionStorage.getItem("queue-cursor") : null;
    if (saved === null) { return; }
    window.sessionStorage.removeItem("queue-cursor");
    var list = rows();
    if (list.length) { setCurrent(list[Math.min(parseInt(saved, 10) || 0, list.length - 1)]); }
    document.body.setAttribute("data-cursor", "restored");
  });

  document.addEventListener("keydown", function (evt) {
    if (evt.ctrlKey || evt.metaKey || evt.altKey) { return; }
    if (evt.key === "Escape" && typing(evt)) { evt.target.blur(); return; }
    if (typing(evt)) { return; }
    var row = current();
    switch (evt.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "x": {
        var check = checkOf(row);
        if (check) { check.checked = !check.checked; lastChecked = check; refreshSelection(); }
        break;
      }
      case "Enter":
      case "o":
        if (row && row.getAttribute("data-href")) { window.location.assign(row.getAttribute("data-href")); }
        else { return; }
        break;
      case "r": {
        var retry = row ? row.querySelector("button[data-row-retry]") : document.querySelector("button[data-retry]");
        if (retry) { retry.click(); } else { return; }
        break;
      }
      case "d": {
        var purge = row ? row.querySelector("button[data-row-purge]") : document.querySelector("button[data-purge]");
        if (purge) { purge.click(); } else { return; }
        break;
      }
      case "/": {
        var search = document.querySelector("input[data-search]");
        if (search) { search.focus(); search.select(); } else { return; }
        break;
      }
      default: return;
    }
    evt.preventDefault();
  });
})();
