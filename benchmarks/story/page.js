(function () {
  "use strict";
  function show(story, mode, scroll) {
    var secs = document.querySelectorAll("section.story");
    for (var i = 0; i < secs.length; i++) {
      var s = secs[i];
      if (s.dataset.story !== story) continue;
      var panes = s.querySelectorAll(".pane"), found = false, j;
      for (j = 0; j < panes.length; j++) if (panes[j].dataset.mode === mode) found = true;
      if (!found) return false;
      for (j = 0; j < panes.length; j++) panes[j].hidden = panes[j].dataset.mode !== mode;
      var bs = s.querySelectorAll(".switch button");
      for (j = 0; j < bs.length; j++) {
        var on = bs[j].dataset.mode === mode;
        bs[j].classList.toggle("on", on);
        bs[j].setAttribute("aria-selected", on ? "true" : "false");
      }
      if (scroll) s.scrollIntoView();
      return true;
    }
    return false;
  }
  function fromHash() {
    var h = location.hash.slice(1);
    try { h = decodeURIComponent(h); } catch (e) {}
    var k = h.indexOf("/");
    if (k < 0) return;
    show(h.slice(0, k), h.slice(k + 1), true);
  }
  document.addEventListener("click", function (ev) {
    var b = ev.target.closest(".switch button");
    if (b) {
      var s = b.closest("section.story");
      if (show(s.dataset.story, b.dataset.mode, false)) {
        try {
          history.replaceState(null, "", "#" + encodeURIComponent(s.dataset.story) + "/" + encodeURIComponent(b.dataset.mode));
        } catch (e) {}
      }
      return;
    }
    var a = ev.target.closest("a.cell");
    if (a) show(a.dataset.story, a.dataset.mode, true);
  });
  window.addEventListener("hashchange", fromHash);
  document.documentElement.classList.add("js");
  fromHash();
})();