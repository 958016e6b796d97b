/* slogate charts: uPlot charts of a run's time series, percentile curves and server figures.
   Used inline by slo-report.html (offline, no request) and by the web UI's "TTFT / SLO" tab.
   Data shapes: see slo/outputs/html.py (chart_data). Apache-2.0, part of slogate. */
(function () {
  "use strict";
  var CLASS_COLORS = { all: "#1f77b4", shared: "#2ca02c", unique: "#ff7f0e" };
  var PALETTE = ["#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c"];
  var ERROR_COLORS = ["#d62728", "#b2182b", "#ef8a62", "#8e0152", "#c51b7d", "#e08214", "#7f3b08", "#fd8d3c"];

  var RUN_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

  function runColor(j) {
    return RUN_COLORS[j % RUN_COLORS.length];
  }

  function classColor(name, i) {
    return CLASS_COLORS[name] || PALETTE[(i || 0) % PALETTE.length];
  }

  function fmtElapsed(s) {
    if (s == null || !isFinite(s)) return "";
    var neg = s < 0 ? "-" : "";
    s = Math.round(Math.abs(s));
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    var mm = (h ? String(m).padStart(2, "0") : String(m)) + ":" + String(sec).padStart(2, "0");
    return neg + (h ? h + ":" + mm : mm);
  }

  function fmtMs(v) {
    if (v == null) return "";
    if (v >= 1000) return (v / 1000).toFixed(v >= 10000 ? 0 : 1) + " s";
    if (v >= 10) return v.toFixed(0) + " ms";
    if (v >= 1) return v.toFixed(1) + " ms";
    return v.toFixed(3) + " ms";
  }

  function fmtPercentileX(x) {
    // x = 1 / (1 - q): 1 -> 0%, 10 -> 90%, 100 -> 99%, 1000 -> 99.9%
    if (x == null) return "";
    var q = 100 * (1 - 1 / x);
    if (q <= 0) return "0%";
    var digits = Math.max(0, Math.ceil(Math.log10(x)) - 2);
    return q.toFixed(digits) + "%";
  }

  function width(el) {
    var w = el.clientWidth || (el.parentElement && el.parentElement.clientWidth) || 900;
    return Math.max(320, Math.min(w, 1400));
  }

  function draw(el, opts, data) {
    if (el._uplot) {
      el._uplot.destroy();
    }
    el.innerHTML = "";
    opts.width = opts.width || width(el);
    opts.height = opts.height || 280;
    var u = new uPlot(opts, data, el);
    el._uplot = u;
    el.setAttribute("data-drawn", String(data[0].length));
    return u;
  }

  var FROM_ZERO = function (u, min, max) { return [Math.min(0, min), Math.max(max, 1)]; };
  var ELAPSED_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];

  function elapsedAxis(label) {
    return {
      label: label || "time since the run started (m:ss)",
      incrs: ELAPSED_INCRS,
      values: function (u, splits) { return splits.map(fmtElapsed); },
    };
  }

  function msAxis(label) {
    return { label: label || "ms", size: 70, values: function (u, splits) { return splits.map(fmtMs); } };
  }

  function xSeries() {
    return { label: "elapsed", value: function (u, v) { return fmtElapsed(v); } };
  }

  /* Seconds since the run started; an interval that began before (intervals are whole multiples
     of the interval length in Unix time) is drawn at 0. */
  function elapsed(ts, origin) {
    if (origin == null) origin = ts.length ? ts[0] : 0;
    return ts.map(function (t) { return Math.max(0, Math.round((t - origin) * 1000) / 1000); });
  }

  // Points are drawn where uPlot finds room for them (sparse data: a lone interval between gaps
  // stays visible), lines everywhere.
  function line(label, stroke, extra) {
    var s = { label: label, stroke: stroke, width: 1.5, spanGaps: false, points: { size: 5, fill: stroke } };
    for (var k in extra || {}) s[k] = extra[k];
    return s;
  }

  /* Latency percentiles per interval and class, with the SLO targets as dashed lines.
     run: {origin, series, targets}; options: {metric: "ttft", percentiles: ["p50", "p95"], classes, title} */
  function latencyOverTime(el, run, options) {
    options = options || {};
    var metric = options.metric || "ttft";
    var pcts = options.percentiles || ["p50", "p95"];
    var series = run.series;
    if (!series || !series.t || !series.t.length) {
      el.innerHTML = '<p class="empty">No requests measured yet.</p>';
      el.setAttribute("data-drawn", "0");
      return null;
    }
    var xs = elapsed(series.t, run.origin);
    var data = [xs];
    var defs = [xSeries()];
    var classes = options.classes || series.classes;
    classes.forEach(function (cls, i) {
      var figures = series.latency[metric] && series.latency[metric][cls];
      if (!figures) return;
      pcts.forEach(function (p, j) {
        data.push(figures[p].map(function (v) { return v == null ? null : Math.max(v, 0.001); }));
        defs.push(line(metric.toUpperCase() + " " + p + " " + cls, classColor(cls, i), {
          width: j === pcts.length - 1 ? 2 : 1.2,
          dash: j === pcts.length - 1 ? undefined : [4, 4],
          value: function (u, v) { return fmtMs(v); },
        }));
      });
    });
    (run.targets || []).forEach(function (t) {
      if (t.metric !== metric || classes.indexOf(t["class"]) < 0) return;
      data.push(xs.map(function () { return t.max_ms; }));
      defs.push(line("target " + t.label, classColor(t["class"], classes.indexOf(t["class"])), {
        width: 1.5, dash: [10, 6], points: { show: false }, value: function (u, v) { return fmtMs(v); },
      }));
    });
    return draw(el, {
      title: options.title,
      scales: { x: { time: false, range: FROM_ZERO }, y: { distr: 3, log: 10 } },
      axes: [elapsedAxis(), msAxis(metric.toUpperCase())],
      series: defs,
    }, data);
  }

  /* Requests per second (all and per class) and failures per second by kind, per interval. */
  function rateOverTime(el, run, options) {
    options = options || {};
    var series = run.series;
    if (!series || !series.t || !series.t.length) {
      el.innerHTML = '<p class="empty">No requests measured.</p>';
      el.setAttribute("data-drawn", "0");
      return null;
    }
    /* per second of what each interval covered: a run's first and last intervals are partial */
    var covered = series.covered_s || series.t.map(function () { return series.interval_s || 1; });
    var xs = elapsed(series.t, run.origin);
    var data = [xs];
    var defs = [xSeries()];
    var rate = function (v, i) { return Math.round((v / covered[i]) * 1000) / 1000; };
    series.classes.forEach(function (cls, i) {
      data.push(series.requests[cls].map(rate));
      defs.push(line("requests/s " + cls, classColor(cls, i), { width: cls === "all" ? 2 : 1.2 }));
    });
    Object.keys(series.errors_by_kind || {}).forEach(function (kind, i) {
      data.push(series.errors_by_kind[kind].map(rate));
      defs.push(line("errors/s " + kind, ERROR_COLORS[i % ERROR_COLORS.length], { width: 2, dash: [2, 3] }));
    });
    return draw(el, {
      title: options.title,
      scales: { x: { time: false, range: FROM_ZERO }, y: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
      axes: [elapsedAxis(), { label: "per second", size: 60 }],
      series: defs,
    }, data);
  }

  /* Percentile curves, HdrHistogram style: x = 1 / (1 - q) on a log axis.
     curves: [{label, color, x: [...], y: [...]}] on one shared x grid (grid). */
  function percentileCurves(el, grid, curves, options) {
    options = options || {};
    var shown = curves.filter(function (c) { return c.y.some(function (v) { return v != null; }); });
    if (!shown.length) {
      el.innerHTML = '<p class="empty">No samples.</p>';
      el.setAttribute("data-drawn", "0");
      return null;
    }
    var data = [grid];
    var defs = [{ label: "percentile", value: function (u, v) { return fmtPercentileX(v); } }];
    shown.forEach(function (c) {
      data.push(c.y);
      defs.push(line(c.label, c.color, { width: c.width || 1.8, dash: c.dash, value: function (u, v) { return fmtMs(v); } }));
    });
    var maxX = grid[grid.length - 1];
    return draw(el, {
      title: options.title,
      scales: { x: { time: false, distr: 3, log: 10 }, y: { distr: 3, log: 10 } },
      axes: [
        {
          label: "percentile",
          splits: function () {
            var out = [];
            for (var x = 1; x <= maxX * 1.0001; x *= 10) out.push(x);
            return out;
          },
          values: function (u, splits) { return splits.map(fmtPercentileX); },
        },
        msAxis(options.unit || "ms"),
      ],
      series: defs,
    }, data);
  }

  /* Server figures over time: KV-cache usage and prefix-cache hit rate (%), requests waiting and running. */
  function serverOverTime(el, run, options) {
    options = options || {};
    var s = run.server;
    if (!s || !s.t || s.t.length < 2) {
      el.innerHTML = '<p class="empty">No server figures (/metrics was not scraped or unavailable).</p>';
      el.setAttribute("data-drawn", "0");
      return null;
    }
    var origin = run.origin != null ? run.origin : s.t[0];
    var pct = function (v) { return v == null ? null : Math.round(v * 10000) / 100; };
    var data = [
      s.t.map(function (t) { return t - origin; }),
      s.kv_cache_usage.map(pct),
      s.prefix_cache_hit_rate.map(pct),
      s.num_requests_waiting,
      s.num_requests_running,
    ];
    return draw(el, {
      title: options.title,
      scales: { x: { time: false, range: FROM_ZERO }, pct: { range: [0, 100] }, n: { range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; } } },
      axes: [
        elapsedAxis(),
        { scale: "pct", label: "% (KV cache, hit rate)", size: 60 },
        { scale: "n", side: 1, label: "requests", grid: { show: false }, size: 50 },
      ],
      series: [
        xSeries(),
        line("KV-cache usage %", "#6f42c1", { scale: "pct", width: 2 }),
        line("prefix-cache hit rate %", "#2ca02c", { scale: "pct", width: 1.5, spanGaps: true }),
        line("requests waiting", "#d62728", { scale: "n", width: 2 }),
        line("requests running", "#1f77b4", { scale: "n", width: 1.2, dash: [4, 4] }),
      ],
    }, data);
  }

  window.SlogateCharts = {
    classColor: classColor,
    runColor: runColor,
    palette: PALETTE,
    fmtMs: fmtMs,
    fmtElapsed: fmtElapsed,
    elapsedAxis: elapsedAxis,
    elapsed: elapsed,
    fromZero: FROM_ZERO,
    latencyOverTime: latencyOverTime,
    rateOverTime: rateOverTime,
    percentileCurves: percentileCurves,
    serverOverTime: serverOverTime,
  };
})();
