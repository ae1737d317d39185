// npu-migrate review page: the filters. A finding is shown when every facet (code, action,
// plan, safety) has its value ticked; a file whose findings are all hidden is hidden too.
(function () {
  "use strict";
  var boxes = Array.prototype.slice.call(document.querySelectorAll("#filters input[data-facet]"));
  var findings = Array.prototype.slice.call(document.querySelectorAll(".finding"));
  var files = Array.prototype.slice.call(document.querySelectorAll("details.file"));
  var shown = document.getElementById("shown-count");

  function allowed() {
    var sets = {};
    boxes.forEach(function (box) {
      var facet = box.getAttribute("data-facet");
      sets[facet] = sets[facet] || {};
      if (box.checked) { sets[facet][box.value] = true; }
    });
    return sets;
  }

  function apply() {
    var sets = allowed();
    var visible = {};  // a finding can appear twice (needs attention + its file): count it once
    findings.forEach(function (el) {
      var ok = Object.keys(sets).every(function (facet) {
        return sets[facet][el.getAttribute("data-" + facet)] === true;
      });
      el.hidden = !ok;
      var item = el.parentElement;
      if (item && item.tagName === "LI") { item.hidden = !ok; }
      if (ok) { visible[el.getAttribute("data-id")] = true; }
    });
    files.forEach(function (file) {
      var own = file.querySelectorAll(".finding");
      if (own.length === 0) { return; }
      file.hidden = file.querySelectorAll(".finding:not([hidden])").length === 0;
    });
    if (shown) { shown.textContent = String(Object.keys(visible).length); }
  }

  boxes.forEach(function (box) { box.addEventListener("change", apply); });
  apply();
}());
