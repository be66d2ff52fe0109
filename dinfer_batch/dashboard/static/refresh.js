// Live refresh: every data-refresh seconds, fetch this page again and swap in its <main>.
// Skipped while the tab is hidden or while focus is inside the page's content (a keyboard
// user keeps their place); without JavaScript the pages work, they just do not refresh.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var seconds = main && Number(main.getAttribute("data-refresh"));
  if (!seconds) { return; }
  document.documentElement.setAttribute("data-live", "on");  // hides the Refresh link
  function busy() {
    var active = document.activeElement;
    return document.hidden || (active && active !== main && main.contains(active));
  }
  function refresh() {
    if (busy()) { return schedule(); }
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok || response.redirected) { window.location.reload(); return null; }
        return response.text();
      })
      .then(function (html) {
        if (html === null) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("main");
        if (fresh && !busy()) { main.innerHTML = fresh.innerHTML; }
        schedule();
      })
      .catch(schedule);
  }
  function schedule() { window.setTimeout(refresh, seconds * 1000); }
  schedule();
})();
