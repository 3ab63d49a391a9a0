// wurk dashboard: the little behaviour the pages have. Loaded as a file (the CSP allows no
// inline script); every page works without it, it only adds confirmations, "select all",
// the live numbers and the Live Poll.
(function () {
  "use strict";

  // -- confirmation before destructive actions -------------------------------------------
  function confirmations(root) {
    root.querySelectorAll("button[data-confirm]").forEach(function (button) {
      button.addEventListener("click", function (event) {
        if (!window.confirm(button.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
  }

  // -- selecting rows --------------------------------------------------------------------
  function selection(root) {
    root.querySelectorAll("form").forEach(function (form) {
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

  // -- the page's language: its text comes from <body data-text-…> (the server's catalog),
  // numbers and units from the browser's Intl in the page's <html lang>.
  function lang() { return document.documentElement.lang || "en"; }

  function text(name, values) {
    var template = document.body.getAttribute("data-text-" + name) || "";
    return template.replace(/\{(\w+)\}/g, function (whole, key) {
      return values && Object.prototype.hasOwnProperty.call(values, key) ? String(values[key]) : whole;
    });
  }

  function number(value) {
    try { return Number(value).toLocaleString(lang()); } catch (e) { return String(value); }
  }

  function unit(value, name, digits) {
    try {
      return new Intl.NumberFormat(lang(), {style: "unit", unit: name, unitDisplay: "short",
                                            maximumFractionDigits: digits,
                                            minimumFractionDigits: digits}).format(value);
    } catch (e) { return value.toFixed(digits) + " " + name; }
  }

  function seconds(value) {
    if (value < 10) { return unit(value, "second", 2); }
    if (value < 60) { return unit(value, "second", 0); }
    if (value < 3600) { return unit(value / 60, "minute", 0); }
    if (value < 86400) { return unit(value / 3600, "hour", 0); }
    return unit(value / 86400, "day", 0);
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
        el.textContent = text("invalid", {raw: invalid["/sidekiq/" + name] || ""});
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
      say(text("live", {time: snapshot.server_utc_time}), true);
    });
    source.addEventListener("unavailable", function () { say(text("redis-down"), false); });
    source.addEventListener("error", function () { say(text("reconnecting"), false); });
  }

  // -- Live Poll: re-fetch this page every web_poll_interval and swap its content ---------
  // The choice is kept in localStorage, so it follows the viewer from page to page, as
  // Sidekiq's does. Nothing is fetched while the tab is hidden or while the viewer is in
  // the middle of something a swap would undo; the first failed fetch stops the polling.
  var POLL_KEY = "wurk-live-poll";
  var LONGEST_WAIT = 2147483647;  // setTimeout's longest delay in ms; a longer one fires at once

  function pollRemembered() {
    try { return window.localStorage.getItem(POLL_KEY) === "on"; } catch (e) { return false; }
  }

  function rememberPoll(on) {
    try { window.localStorage.setItem(POLL_KEY, on ? "on" : "off"); } catch (e) { /* this page only */ }
  }

  // A row ticked for a bulk action, or a text field (the filter) being typed in.
  function inTheMiddleOfSomething(content) {
    if (content.querySelector("input[type=checkbox]:checked")) { return true; }
    var active = document.activeElement;
    if (!active || active === document.body) { return false; }
    if (active.tagName === "SELECT" || active.tagName === "TEXTAREA") { return true; }
    return active.tagName === "INPUT" &&
      !/^(checkbox|radio|button|submit|reset|hidden)$/i.test(active.type);
  }

  function PollFailed(message) { this.message = message; }

  function livePoll() {
    var box = document.getElementById("live-poll");
    var content = document.getElementById("content");
    if (!box || !content || !window.fetch || !window.DOMParser) { return; }
    var button = document.getElementById("live-poll-toggle");
    var state = document.getElementById("live-poll-state");
    var seconds = Number(box.getAttribute("data-poll-interval"));
    var delay = isFinite(seconds) && seconds > 0 ? Math.min(seconds * 1000, LONGEST_WAIT) : 5000;
    var on = false, timer = null, generation = 0;

    function show() {
      button.textContent = on ? text("poll-stop") : text("poll-start");
      button.setAttribute("aria-pressed", on ? "true" : "false");
      box.className = "live-poll " + (on ? "on" : "off");
    }
    function schedule() {
      window.clearTimeout(timer);
      timer = on ? window.setTimeout(tick, delay) : null;
    }
    function halt() {
      on = false;
      generation += 1;  // an answer still on its way is dropped
      schedule();
      show();
    }
    function fail(reason) {  // stop here; the choice stays remembered for the next page
      halt();
      state.textContent = text("poll-stopped", {reason: reason});
    }
    function swap(html) {
      var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
      if (!fresh) { throw new PollFailed(text("poll-not-page")); }
      if (inTheMiddleOfSomething(content)) { return; }  // begun while the fetch was out
      var next = document.importNode(fresh, true);
      content.parentNode.replaceChild(next, content);
      content = next;
      confirmations(content);
      selection(content);
    }
    function tick() {
      timer = null;
      if (!on) { return; }
      if (document.visibilityState === "hidden" || inTheMiddleOfSomething(content)) {
        schedule();
        return;
      }
      var mine = generation;
      window.fetch(window.location.href, {credentials: "same-origin", cache: "no-store",
                                          headers: {"Accept": "text/html"}})
        .then(function (response) {
          if (response.redirected) { throw new PollFailed(text("poll-moved")); }
          if (!response.ok) {
            throw new PollFailed(text("poll-status", {status: response.status}));
          }
          return response.text();
        }, function () {
          throw new PollFailed(text("poll-unreachable"));
        })
        .then(function (html) {
          if (mine !== generation) { return; }
          swap(html);
          schedule();
        })
        .catch(function (error) {
          if (mine !== generation) { return; }
          fail(error instanceof PollFailed ? error.message : text("poll-failed"));
        });
    }
    button.addEventListener("click", function () {
      if (on) {
        halt();
        rememberPoll(false);
        return;
      }
      on = true;
      state.textContent = "";
      rememberPoll(true);
      show();
      tick();
    });
    on = pollRemembered();
    show();
    box.hidden = false;
    schedule();
  }

  document.addEventListener("DOMContentLoaded", function () {
    confirmations(document);
    selection(document);
    live();
    livePoll();
  });
}());
