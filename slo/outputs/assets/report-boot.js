/* Draws every [data-chart] of slo-report.html from the embedded JSON (slogate, Apache-2.0). */
(function () {
  var D = JSON.parse(document.getElementById("slogate-data").textContent);
  var C = window.SlogateCharts;
  function curvesOf(run, metric, cls, label, color, width) {
    return {label: label, color: color, width: width, y: run.curves[metric][cls] || []};
  }
  function draw(el) {
    var kind = el.getAttribute("data-chart"), i = +el.getAttribute("data-run");
    var metric = el.getAttribute("data-metric") || "ttft", cls = el.getAttribute("data-cls");
    var run = D.runs[i], title = undefined;
    if (kind === "latency-time") return C.latencyOverTime(el, run, {metric: metric});
    if (kind === "rate-time") return C.rateOverTime(el, run);
    if (kind === "server-time") return C.serverOverTime(el, run);
    if (kind === "percentiles") {
      var curves = run.classes.map(function (c, j) {
        return curvesOf(run, metric, c, metric.toUpperCase() + " " + c, C.classColor(c, j), c === "all" ? 2.2 : 1.6);
      });
      if (run.baseline_curves) {  /* --slo-baseline: the baseline's curves, dashed, in each class's color */
        run.classes.forEach(function (c, j) {
          var y = run.baseline_curves[metric][c];
          if (y) curves.push({label: "baseline " + c, color: C.classColor(c, j), width: 1.2, dash: [3, 4], y: y});
        });
      }
      (run.targets || []).forEach(function (t) {
        if (t.metric !== metric) return;
        curves.push({label: "target " + t.label, color: C.classColor(t["class"], run.classes.indexOf(t["class"])),
                     width: 1.2, dash: [10, 6], y: D.grids[metric].map(function () { return t.max_ms; })});
      });
      return C.percentileCurves(el, D.grids[metric], curves, {unit: metric.toUpperCase()});
    }
    if (kind === "overlay-percentiles") {
      return C.percentileCurves(el, D.grids[metric], D.runs.map(function (r, j) {
        return curvesOf(r, metric, cls, D.names[j], C.runColor(j), 2);
      }), {unit: metric.toUpperCase()});
    }
    if (kind === "overlay-time") {
      var tables = [], labels = [];
      D.runs.forEach(function (r, j) {
        var s = r.series;
        if (!s || !s.latency[metric][cls]) return;
        tables.push([C.elapsed(s.t, r.origin), s.latency[metric][cls].p95]);
        labels.push(j);
      });
      if (!tables.length) {
        el.innerHTML = '<p class="empty">No time series.</p>';
        el.setAttribute("data-drawn", "0");
        return;
      }
      var joined = uPlot.join(tables);
      var series = [{label: "elapsed", value: function (u, v) { return C.fmtElapsed(v); }}];
      labels.forEach(function (j) {
        series.push({label: D.names[j] + " p95", stroke: C.runColor(j), width: 2,
                     points: {size: 5, fill: C.runColor(j)}, value: function (u, v) { return C.fmtMs(v); }});
      });
      el.innerHTML = "";
      var u = new uPlot({width: Math.max(320, Math.min(el.clientWidth || 900, 1400)), height: 280,
        scales: {x: {time: false, range: C.fromZero}, y: {distr: 3, log: 10}},
        axes: [C.elapsedAxis("time since each run started (m:ss)"),
               {label: metric.toUpperCase(), size: 70, values: function (u, v) { return v.map(C.fmtMs); }}],
        series: series}, joined, el);
      el.setAttribute("data-drawn", String(joined[0].length));
      return u;
    }
  }
  Array.prototype.forEach.call(document.querySelectorAll("[data-chart]"), function (el) {
    try { draw(el); } catch (err) {
      el.setAttribute("data-error", String(err));
      el.innerHTML = '<p class="empty">chart failed: ' + String(err).replace(/</g, "&lt;") + "</p>";
    }
  });
  document.body.setAttribute("data-charts-ready", "1");
})();
