// lessonboard's only script besides htmx. No inline scripts anywhere (strict CSP).
(function () {
  "use strict";
  // Polling ([data-poll] elements with hx-trigger="every …") pauses while the tab is hidden, and
  // refreshes once when the tab is visible again ("visible-again" is in their hx-trigger).
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) { return; }
    // Hidden tab: no request. Ticked rows or a field being typed in: a refresh would drop them.
    var focused = document.activeElement;
    var typingInside = focused && focused !== document.body && elt.contains(focused) && focused.matches("input, textarea, select");
    if (document.hidden || typingInside || elt.querySelector("input[type=checkbox]:checked")) {
      evt.preventDefault();
      // Counted, so a test (and a curious person in devtools) can see the poll was held back.
      elt.setAttribute("data-poll-skipped", String(parseInt(elt.getAttribute("data-poll-skipped") || "0", 10) + 1));
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && document.body) {
      document.body.dispatchEvent(new CustomEvent("visible-again", { bubbles: false }));
    }
  });
  // Filter forms (hx-push-url) ask on submit and on change, and Enter in a text field fires both; the
  // field's change also fires when it loses focus — say, to a click on a result the filter has just
  // found. A second answer for the same filter would swap the results and push the same address under
  // that click's navigation, which can lose the click. So a form does not ask for the filter it is
  // already asking for, nor, on a change, for the one the address already shows.
  var asking = new WeakMap();
  document.addEventListener("htmx:confirm", function (evt) {
    var form = evt.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("hx-push-url")) { return; }
    var trigger = evt.detail && evt.detail.triggeringEvent;
    var asked = new URLSearchParams(new FormData(form)).toString();
    var shown = new URLSearchParams(window.location.search).toString();
    if (asked === asking.get(form) || (trigger && trigger.type === "change" && asked === shown)) {
      evt.preventDefault();
      return;
    }
    asking.set(form, asked);
  });
  document.addEventListener("htmx:afterRequest", function (evt) {
    var form = evt.detail && evt.detail.elt;
    if (form instanceof HTMLFormElement) { asking.delete(form); }
  });
  // The nav collapses to a menu button on narrow screens (static/css/app.css): the button opens it.
  document.addEventListener("click", function (evt) {
    var toggle = evt.target instanceof Element && evt.target.closest("#menu-toggle");
    if (!toggle) { return; }
    var open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    var bar = toggle.closest(".topbar");
    if (bar) { bar.classList.toggle("menu-open", open); }
  });
  // Buttons and forms marked data-confirm ask first (works with and without htmx).
  document.addEventListener("submit", function (evt) {
    var form = evt.target;
    var message = form && form.getAttribute && form.getAttribute("data-confirm");
    if (message && !window.confirm(message)) {
      evt.preventDefault();
      evt.stopImmediatePropagation();
    }
  }, true);
  // One keyboard help on every page that has one: a <dialog id="kbd-help"> opened by "?" or a
  // [data-help-open] button, closed by Esc (the dialog's own) or its Close button.
  function typing(target) {
    return target instanceof Element && target.closest("input, textarea, select, [contenteditable]") !== null;
  }
  function openHelp() {
    var dialog = document.getElementById("kbd-help");
    if (dialog && typeof dialog.showModal === "function" && !dialog.open) { dialog.showModal(); return true; }
    return false;
  }
  document.addEventListener("click", function (evt) {
    if (evt.target instanceof Element && evt.target.closest("[data-help-open]")) { openHelp(); }
  });
  document.addEventListener("keydown", function (evt) {
    if (evt.key === "?" && !evt.ctrlKey && !evt.metaKey && !evt.altKey && !typing(evt.target) && openHelp()) {
      evt.preventDefault();
    }
  });
})();
