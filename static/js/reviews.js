// Keyboard for the review queue and proposal pages: j/k move, o/Enter open, x select, a approve,
// r reject (focus the reason), e edit (Ctrl+Enter saves), u undo; app.js opens the ? help. No inline script (CSP).
(function () {
  "use strict";
  var rows = [];
  var current = -1;

  function typing(target) {
    var tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function select(index) {
    if (!rows.length) { return; }
    current = Math.max(0, Math.min(rows.length - 1, index));
    rows.forEach(function (row, i) { row.classList.toggle("selected", i === current); });
    rows[current].scrollIntoView({ block: "nearest" });
  }

  function refreshRows() {
    rows = Array.prototype.slice.call(document.querySelectorAll("[data-review-row]"));
    if (rows.length) { select(current < 0 ? 0 : current); } else { current = -1; }
  }

  function submit(id) {
    var form = document.getElementById(id);
    if (!form) { return false; }
    var button = form.querySelector("button[type=submit]");
    if (button && button.disabled) { return false; }
    if (form.requestSubmit) { form.requestSubmit(); } else { form.submit(); }
    return true;
  }

  function follow(key) {
    var link = document.querySelector("a[data-key='" + key + "']");
    if (link) { window.location.href = link.href; return true; }
    return false;
  }

  // Leaving a proposal page gives its hold back (a reload or the next proposal holds anew; the server
  // ignores a release for an older hold). sendBeacon survives the navigation; the CSRF token goes in the body.
  function releaseHold() {
    var held = document.getElementById("held");
    var token = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (!held || !token || !navigator.sendBeacon) { return; }
    var body = new FormData();
    body.append("csrfmiddlewaretoken", token.value);
    body.append("held_until", held.getAttribute("data-held-until") || "");
    navigator.sendBeacon(held.getAttribute("data-release-url"), body);
  }
  window.addEventListener("pagehide", releaseHold);

  document.addEventListener("DOMContentLoaded", function () {
    refreshRows();
    document.body.setAttribute("data-keys", "ready");  // the keyboard is live (tests wait for this)
  });
  document.addEventListener("htmx:afterSettle", refreshRows);

  document.addEventListener("keydown", function (evt) {
    var target = evt.target;
    if (evt.key === "Enter" && (evt.ctrlKey || evt.metaKey) && target && target.form && target.form.id === "edit-form") {
      evt.preventDefault();
      submit("edit-form");
      return;
    }
    if (evt.key === "Escape" && typing(target)) { target.blur(); return; }
    if (typing(target) || evt.altKey || evt.ctrlKey || evt.metaKey) { return; }
    var handled = true;
    switch (evt.key) {
      case "j":
        if (rows.length) { select(current + 1); } else { handled = follow("j"); }
        break;
      case "k":
        if (rows.length) { select(current - 1); } else { handled = follow("k"); }
        break;
      case "o":
      case "Enter":
        if (rows.length && current >= 0) { window.location.href = rows[current].getAttribute("data-href"); } else { handled = false; }
        break;
      case "x":
        if (rows.length && current >= 0) {
          var box = rows[current].querySelector("input[type=checkbox]");
          if (box) { box.checked = !box.checked; }
        } else { handled = false; }
        break;
      case "a":
        handled = submit("approve-form");
        break;
      case "r":
        var reason = document.getElementById("reject-reason") || document.getElementById("bulk-reason");
        if (reason) { reason.focus(); } else { handled = false; }
        break;
      case "e":
        var details = document.getElementById("edit-details");
        if (details) {
          details.open = true;
          var field = details.querySelector("[data-edit-first]") || details.querySelector("textarea, input[type=text]");
          if (field) { field.focus(); }
        } else { handled = false; }
        break;
      case "u":
        handled = submit("undo-form");
        break;
      default:
        handled = false;
    }
    if (handled) { evt.preventDefault(); }
  });
})();
