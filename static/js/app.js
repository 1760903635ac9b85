// lessonboard's only script besides htmx. No inline scripts anywhere (strict CSP).
(function () {
  "use strict";
  // Polling ([data-poll] elements with hx-trigger="every …") pauses while the tab is hidden, and
  // refreshes once when the tab is visible again ("visible-again" is in their hx-trigger).
  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (document.hidden && elt && elt.hasAttribute && elt.hasAttribute("data-poll")) {
      evt.preventDefault();
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden && document.body) {
      document.body.dispatchEvent(new CustomEvent("visible-again", { bubbles: false }));
    }
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
})();
