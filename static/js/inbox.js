// Inbox keyboard: j/k move, o/Enter open, a/r/x the row's actions (r on a proposal focuses its reason,
// Enter then rejects), ? help (app.js). The cursor survives the list's polling and in-place actions.
// No inline scripts (strict CSP): everything is bound here, by delegation.
(function () {
  "use strict";
  var currentKey = null;

  function rows() { return Array.prototype.slice.call(document.querySelectorAll("#inbox-list tr[data-inbox-row], #inbox-list tr[data-inbox-done]")); }
  function keyOf(row) { return row ? row.id : null; }
  function current() { return currentKey ? document.getElementById(currentKey) : null; }

  function setCurrent(row) {
    rows().forEach(function (r) { r.classList.remove("current"); });
    currentKey = keyOf(row);
    if (row) { row.classList.add("current"); row.scrollIntoView({ block: "nearest" }); }
  }

  function move(step) {
    var list = rows();
    if (!list.length) { return; }
    var i = list.indexOf(current());
    var next = i < 0 ? 0 : Math.min(list.length - 1, Math.max(0, i + step));
    setCurrent(list[next]);
  }

  function restore() {
    var list = rows();
    var row = current();
    if (!row && list.length) { row = list[0]; }
    setCurrent(row);
    document.body.setAttribute("data-keys", "ready");  // tests wait for this
  }

  function typing(target) {
    return target instanceof Element && target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  function press(row, key) {
    var button = row && row.querySelector("button[data-action-key='" + key + "']");
    if (!button) { return false; }
    if (button.hasAttribute("data-needs-reason")) {
      var reason = row.querySelector("input[data-reason]");
      if (reason && !reason.value.trim()) { reason.focus(); return true; }
    }
    // A click, not requestSubmit: htmx sends the clicked button's name and value (the action) and the
    // click handler below asks for a confirmation where the button wants one.
    button.click();
    return true;
  }

  document.addEventListener("DOMContentLoaded", restore);
  document.addEventListener("htmx:afterSettle", function () {
    // After a poll or an action the row under the cursor may be gone: keep the position.
    if (!current()) { currentKey = null; }
    restore();
  });
  document.addEventListener("click", function (evt) {
    var target = evt.target;
    if (!(target instanceof Element)) { return; }
    var confirmButton = target.closest("#inbox-list button[data-confirm]");
    if (confirmButton && !window.confirm(confirmButton.getAttribute("data-confirm"))) {
      evt.preventDefault();
      evt.stopImmediatePropagation();
      return;
    }
    var row = target.closest("#inbox-list tr[data-inbox-row]");
    if (row) { setCurrent(row); }
  }, true);

  document.addEventListener("keydown", function (evt) {
    var target = evt.target;
    if (evt.ctrlKey || evt.metaKey || evt.altKey) { return; }
    if (target instanceof Element && target.matches("#inbox-list input[data-reason]")) {
      if (evt.key === "Enter") {  // Enter in a reason rejects (the form's first button would approve)
        evt.preventDefault();
        var rejectButton = target.form.querySelector("button[data-needs-reason]");
        if (rejectButton && target.value.trim()) { rejectButton.click(); }
      } else if (evt.key === "Escape") { target.blur(); }
      return;
    }
    if (typing(target)) { return; }
    var row = current();
    switch (evt.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "o":
      case "Enter":
        if (row && row.getAttribute("data-href")) { window.location.assign(row.getAttribute("data-href")); } else { return; }
        break;
      case "a":
      case "r":
      case "x":
        if (!press(row, evt.key)) { return; }
        break;
      default: return;
    }
    evt.preventDefault();
  });
})();
