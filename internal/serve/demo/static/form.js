// Disables a protected form's buttons once it is sent, so that a double click
// sends it once. The server does not count on it: a second send of the form
// shows the first one's result anyway, with or without this script.
"use strict";

document.addEventListener("submit", function (event) {
  var form = event.target;
  if (!form.querySelector('input[name="tokend_token"]')) {
    return;
  }
  form.setAttribute("aria-busy", "true");
  form.querySelectorAll("button, input[type=submit]").forEach(function (b) {
    b.disabled = true;
  });
});

// Back can restore the page as it was left, buttons disabled; enable them,
// so that sending it again shows the result of the first send.
window.addEventListener("pageshow", function (event) {
  if (!event.persisted) {
    return;
  }
  document.querySelectorAll('form[aria-busy="true"]').forEach(function (form) {
    form.removeAttribute("aria-busy");
    form.querySelectorAll("button, input[type=submit]").forEach(function (b) {
      b.disabled = false;
    });
  });
});
