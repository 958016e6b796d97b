/* The live TTFT chart of the "TTFT / SLO" tab in Locust's web UI (slogate, Apache-2.0).
   Locust draws the tab's table (React); this script puts a chart above it whenever the table is on
   screen, and takes it away when another tab is chosen. The data come from ./slo/series every 2 s
   (the time series so far and the SLO targets): after Stop the chart keeps its figures, after
   "Reset stats" it starts again empty, as the table does. It needs uPlot and slogate-charts.js. */
(function () {
  "use strict";
  var COLUMNS = "Item|p50 ms|p90 ms|p95 ms|p99 ms|Samples|Target|State";
  var POLL_MS = 2000;
  var state = { data: null, box: null, chart: null };

  function ourTable() {
    var tables = document.querySelectorAll("table");
    for (var i = 0; i < tables.length; i++) {
      var heads = tables[i].querySelectorAll("thead th");
      var names = Array.prototype.map.call(heads, function (th) { return th.textContent.trim(); });
      if (names.join("|") === COLUMNS) return tables[i];
    }
    return null;
  }

  function box() {
    if (state.box) return state.box;
    var b = document.createElement("div");
    b.id = "slogate-ttft-live";
    b.style.cssText = "background:#fff;color:#1f2328;border-radius:4px;padding:8px 12px;margin:8px 0 12px;";
    var title = document.createElement("div");
    title.style.cssText = "font-weight:600;margin:0 0 4px;font-family:system-ui,sans-serif;font-size:14px";
    title.textContent = "TTFT p50 (dashed) and p95 per interval and request class, live; SLO targets as long dashes";
    var chart = document.createElement("div");
    chart.className = "slogate-chart";
    chart.setAttribute("data-chart", "live-ttft");
    b.appendChild(title);
    b.appendChild(chart);
    state.box = b;
    state.chart = chart;
    return b;
  }

  function render() {
    if (!state.box || !state.box.isConnected || !state.data) return;
    try {
      window.SlogateCharts.latencyOverTime(state.chart, state.data, { metric: "ttft" });
    } catch (err) {
      state.chart.setAttribute("data-error", String(err));
    }
  }

  function mount() {
    var table = ourTable();
    var b = state.box;
    if (!table) {
      if (b && b.parentNode) b.parentNode.removeChild(b);
      return;
    }
    var anchor = table.closest(".MuiTableContainer-root") || table.parentElement;
    b = box();
    if (anchor.previousSibling !== b) {
      anchor.parentNode.insertBefore(b, anchor);
      render();
    }
  }

  function poll() {
    fetch("./slo/series", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (d) {
        if (d) {
          state.data = d;
          render();
        }
      })
      .catch(function () {})
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  function start() {
    new MutationObserver(mount).observe(document.body, { childList: true, subtree: true });
    mount();
    poll();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
