// Zephyr UI: live refresh of [data-refresh] blocks and legend toggles of SVG charts. No dependencies.
"use strict";
(function () {
  function refresh(el) {
    var interval = parseInt(el.getAttribute("data-interval") || "1000", 10);
    function tick() {
      fetch(el.getAttribute("data-refresh"), { cache: "no-store" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html !== null && html !== el.innerHTML) { el.innerHTML = html; }
          el.setAttribute("data-refreshed", String(Date.now()));
        })
        .catch(function () { /* server restarting: try again next tick */ })
        .then(function () { setTimeout(tick, interval); });
    }
    setTimeout(tick, interval);
  }
  function legends() {
    document.querySelectorAll("figure.line-chart").forEach(function (fig) {
      fig.querySelectorAll("button.legend").forEach(function (btn) {
        btn.addEventListener("click", function () {
          var k = btn.getAttribute("data-series");
          var g = fig.querySelector('g.series[data-series="' + k + '"]');
          if (!g) { return; }
          var hidden = g.style.display === "none";
          g.style.display = hidden ? "" : "none";
          btn.classList.toggle("off", !hidden);
        });
      });
    });
  }
  document.querySelectorAll("[data-refresh]").forEach(refresh);
  legends();
})();
