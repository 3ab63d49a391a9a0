// wurk dashboard: the little behaviour the pages have. Loaded as a file (the CSP allows no
// inline script); every page works without it, it only adds confirmations, "select all"
// and the live numbers.
(function () {
  "use strict";

  // -- confirmation before destructive actions -------------------------------------------
  function confirmations() {
    document.querySelectorAll("button[data-confirm]").forEach(function (button) {
      button.addEventListener("click", function (event) {
        if (!window.confirm(button.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
  }

  // -- selecting rows --------------------------------------------------------------------
  function selection() {
    document.querySelectorAll("form").forEach(function (form) {
      var all = form.querySelector("input[data-select-all]");
      var boxes = form.querySelectorAll("input[type=checkbox][name=key]");
      var buttons = form.querySelectorAll("button[data-needs-selection]");
      if (!boxes.length) { return; }
      function refresh() {
        var chosen = Array.prototype.some.call(boxes, function (box) { return box.checked; });
        buttons.forEach(function (button) { button.disabled = !chosen; });
      }
      if (all) {
        all.addEventListener("change", function () {
          boxes.forEach(function (box) { box.checked = all.checked; });
          refresh();
        });
      }
      boxes.forEach(function (box) { box.addEventListener("change", refresh); });
      refresh();
    });
  }

  // -- live numbers over Server-Sent Events ----------------------------------------------
  var POINTS = 60;  // samples kept on the live graph
  var WIDTH = 600, HEIGHT = 160, PAD = 4;

  function number(value) { return Number(value).toLocaleString("en-US"); }

  function seconds(value) {
    if (value < 10) { return value.toFixed(2) + " s"; }
    if (value < 60) { return value.toFixed(0) + " s"; }
    if (value < 3600) { return (value / 60).toFixed(0) + " min"; }
    if (value < 86400) { return (value / 3600).toFixed(0) + " h"; }
    return (value / 86400).toFixed(0) + " d";
  }

  function niceCeiling(value) {
    if (value <= 1) { return 1; }
    var magnitude = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * magnitude >= value) { return steps[i] * magnitude; }
    }
    return value;
  }

  function points(values, top) {
    var step = (WIDTH - 2 * PAD) / (POINTS - 1);
    var offset = POINTS - values.length;
    return values.map(function (v, i) {
      var x = PAD + (offset + i) * step;
      var y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * v / top;
      return x.toFixed(1) + "," + y.toFixed(1);
    }).join(" ");
  }

  function drawGrid(grid, top) {
    while (grid.firstChild) { grid.removeChild(grid.firstChild); }
    for (var n = 1; n <= 4; n++) {
      var y = (HEIGHT - PAD - (HEIGHT - 2 * PAD) * n / 4).toFixed(1);
      var line = document.createElementNS("http://www.w3.org/2000/svg", "line");
      line.setAttribute("x1", "0"); line.setAttribute("x2", String(WIDTH));
      line.setAttribute("y1", y); line.setAttribute("y2", y);
      grid.appendChild(line);
    }
  }

  function LiveGraph() {
    this.processed = []; this.failed = []; this.last = null;
    this.lines = { processed: document.getElementById("live-processed"),
                   failed: document.getElementById("live-failed") };
    this.grid = document.getElementById("live-grid");
    this.peak = document.getElementById("live-peak");
  }

  // The change of one counter since the last event; 0 when either is not a number (a
  // stored counter the server could not read arrives as null).
  function delta(now, before) {
    return typeof now === "number" && typeof before === "number" ? Math.max(0, now - before) : 0;
  }

  LiveGraph.prototype.add = function (numbers) {
    if (this.last) {
      this.processed.push(delta(numbers.processed, this.last.processed));
      this.failed.push(delta(numbers.failed, this.last.failed));
      if (this.processed.length > POINTS) { this.processed.shift(); this.failed.shift(); }
    }
    this.last = numbers;
    if (!this.lines.processed || !this.processed.length) { return; }
    var peak = Math.max.apply(null, this.processed.concat(this.failed));
    var top = niceCeiling(peak);
    this.lines.processed.setAttribute("points", points(this.processed, top));
    this.lines.failed.setAttribute("points", points(this.failed, top));
    drawGrid(this.grid, top);
    if (this.peak) { this.peak.textContent = number(peak); }
  };

  function show(numbers, redis, invalid) {
    document.querySelectorAll("[data-stat]").forEach(function (el) {
      var name = el.getAttribute("data-stat");
      var value = numbers[name];
      if (value === undefined) { return; }
      if (value === null) {  // unreadable in Redis: the raw text is beside the document
        el.textContent = "invalid (" + (invalid["/sidekiq/" + name] || "") + ")";
        return;
      }
      el.textContent = el.getAttribute("data-format") === "seconds" ? seconds(value)
                                                                     : number(value);
    });
    document.querySelectorAll("[data-redis]").forEach(function (el) {
      var value = redis[el.getAttribute("data-redis")];
      if (value !== undefined) { el.textContent = String(value); }
    });
  }

  function live() {
    var state = document.getElementById("live-state");
    if (!state || !window.EventSource) { return; }
    var graph = new LiveGraph();
    var source = new EventSource(state.getAttribute("data-stream"));
    function say(text, on) {
      state.textContent = text;
      state.className = "live-state " + (on ? "on" : "off");
    }
    source.addEventListener("stats", function (event) {
      var snapshot = JSON.parse(event.data);
      show(snapshot.sidekiq, snapshot.redis || {}, snapshot.invalid || {});
      graph.add(snapshot.sidekiq);
      say("live · " + snapshot.server_utc_time, true);
    });
    source.addEventListener("unavailable", function () { say("Redis unreachable", false); });
    source.addEventListener("error", function () { say("reconnecting…", false); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    confirmations();
    selection();
    live();
  });
}());
