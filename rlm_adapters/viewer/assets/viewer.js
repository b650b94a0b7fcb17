// The trajectory page. Reads the JSON embedded in #rlm-data and draws a summary, a search box, a
// timeline and a collapsible tree. Tree bodies are built only when opened (and sub-call lists a page
// at a time) so a log with tens of thousands of sub-calls opens as fast as a small one.
(function () {
  "use strict";
  // A page whose data cannot be read says so instead of staying on "Loading".
  function broken(what, error) {
    document.getElementById("app").textContent = "This page cannot show the trajectory: " + what + " (" +
      (error && error.message ? error.message : String(error)) + "). Write it again with rlm view --html.";
    window.rlmViewer = { error: String(error) };
  }
  var D;
  try { D = JSON.parse(document.getElementById("rlm-data").textContent); } catch (error) { broken("its data is not valid JSON", error); return; }
  var PAGE = 50, MAX_HITS = 200;
  var runs = D.runs, turns = D.turns, cells = D.cells, batches = D.batches, calls = D.calls;

  // Where each item sits in the tree, so a search hit or a bar can open its ancestors.
  var cellIter = {}, turnIter = {}, runCell = {};
  runs.forEach(function (run, r) {
    run.iterations.forEach(function (it, k) {
      if (it.turn !== null) turnIter[it.turn] = [r, k];
      it.cells.forEach(function (c) { cellIter[c] = [r, k]; });
    });
  });
  cells.forEach(function (cell, i) { cell.children.forEach(function (r) { runCell[r] = i; }); });

  function esc(s) {
    return String(s === null || s === undefined ? "" : s).replace(/&/g, "&amp;").replace(/</g, "&lt;")
      .replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  function secs(v) { return v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s"; }
  function num(v) { return Number(v || 0).toLocaleString("en-US"); }
  function money(v) { return "$" + Number(v || 0).toFixed(4); }
  function tok(i, o) { return num(i) + " in / " + num(o) + " out tok"; }
  function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }
  function pre(cls, text) { return '<pre class="' + cls + '">' + esc(text) + "</pre>"; }
  function el(tag, cls, html) { var e = document.createElement(tag); e.className = cls; e.innerHTML = html; return e; }

  function badge(finish) {
    if (!finish) return '<span class="badge running">running</span>';
    return '<span class="badge ' + (finish === "final" ? "ok" : "warn") + '">' + esc(finish) + "</span>";
  }

  function usageOf(run) {
    if (run.usage && run.usage.total) return run.usage;
    // A live log has no final usage yet: add up what has been logged so far.
    var u = { total: { calls: 0, input_tokens: 0, output_tokens: 0, cost: 0 }, by_model: {} };
    function add(model, i, o, c) {
      [u.total, u.by_model[model] = u.by_model[model] || { calls: 0, input_tokens: 0, output_tokens: 0, cost: 0 }]
        .forEach(function (t) { t.calls += 1; t.input_tokens += i; t.output_tokens += o; t.cost += c; });
    }
    turns.forEach(function (t) { add(t.model, t.in, t.out, t.cost); });
    calls.forEach(function (c) { if (c.e !== null) add(batches[c.b].model, c.in, c.out, c.cost); });
    return u;
  }

  function summary() {
    var root = runs[0], u = usageOf(root), parts = [];
    function card(label, value) { parts.push('<div class="card"><div class="k">' + esc(label) + '</div><div class="v">' + value + "</div></div>"); }
    card("duration", secs(D.duration));
    card("cost", money(u.total.cost));
    card("tokens", tok(u.total.input_tokens, u.total.output_tokens));
    // usage.sub also counts nested runs' root turns, so it is labelled apart from the REPL's sub-calls.
    if (u.root) card("root model (depth 0)", num(u.root.calls) + " calls · " + tok(u.root.input_tokens, u.root.output_tokens));
    if (u.sub) card("other model calls (incl. nested roots)", num(u.sub.calls) + " calls · " + tok(u.sub.input_tokens, u.sub.output_tokens));
    card("runs", num(runs.length) + " (" + num(runs.length - 1) + " nested)");
    card("llm_query sub-calls (all runs)", num(calls.length) + " in " + num(batches.length) + " batches");
    var rows = Object.keys(u.by_model || {}).sort().map(function (m) {
      var x = u.by_model[m];
      return "<tr><td>" + esc(m) + "</td><td>" + num(x.calls) + "</td><td>" + num(x.input_tokens) + "</td><td>" +
        num(x.output_tokens) + "</td><td>" + money(x.cost) + "</td></tr>";
    }).join("");
    return '<section id="summary"><div class="cards">' + parts.join("") + "</div>" +
      (rows ? '<table class="models"><thead><tr><th>model</th><th>calls</th><th>input tok</th><th>output tok</th><th>cost</th></tr></thead><tbody>' + rows + "</tbody></table>" : "") +
      "</section>";
  }

  function header() {
    var root = runs[0];
    return '<header><h1>RLM run <code>' + esc(String(root.id).slice(0, 8)) + "</code> " + badge(root.finish) + "</h1>" +
      '<div class="query"><b>Query</b> ' + esc(root.query || "(none)") + "</div>" +
      (root.response !== null ? '<div class="answer"><b>Answer</b> ' + esc(root.response) + "</div>" : "") +
      (root.error ? '<div class="err">' + esc(root.error) + "</div>" : "") + findings() + "</header>";
  }

  // The run's cited sources and unsupported claims (a "sources" record the adapter added after the run).
  function findings() {
    var f = D.findings;
    if (!f) return "";
    var out = '<div class="sources"><b>Sources</b> ' +
      (f.sources.length ? f.sources.map(function (s) { return "<code>" + esc(s) + "</code>"; }).join(", ")
        : "none (" + esc(f.note || "not known") + ")") + "</div>";
    if (f.unsupported.length) {
      out += '<div class="err"><b>Unsupported</b> ' + f.unsupported.map(function (c) {
        return "“" + esc(c[0]) + "” (" + esc(c[1]) + ")";
      }).join("; ") + "</div>";
    }
    return out;
  }

  // ---- timeline: one lane per run, turns and cells on the upper row, sub-call batches below ----
  function timeline() {
    var total = Math.max(D.duration, 1e-6), html = [], lanes = [], bars = 0;
    (function order(r) {
      lanes.push(r);
      runs[r].iterations.forEach(function (it) { it.cells.forEach(function (c) { cells[c].children.forEach(order); }); });
    })(0);
    // Bars closer than a pixel are merged, but only on a crowded row: a small run keeps one bar per item.
    var CROWDED = 1000, JOIN = total / 2000;
    function draw(items) {
      var out = [], last = null;
      items.forEach(function (b) {
        if (items.length > CROWDED && last && last.cls === b.cls && b.s <= last.e + JOIN) {
          last.e = Math.max(last.e, b.e); last.n += 1; last.title = last.n + " items · click for the first";
          return;
        }
        last = { cls: b.cls, ref: b.ref, s: b.s, e: b.e, title: b.title, row: b.row, n: 1 };
        out.push(last);
      });
      bars += out.length;
      return out.map(function (b) {
        var left = (100 * b.s / total), width = Math.max(100 * (b.e - b.s) / total, 0);
        return '<div class="bar ' + b.cls + " row" + b.row + (b.n > 1 ? " merged" : "") + '" data-ref="' + b.ref +
          '" style="left:' + left.toFixed(4) + "%;width:" + width.toFixed(4) + '%" title="' + esc(b.title) + '"></div>';
      }).join("");
    }
    function bar(cls, ref, s, e, title, row) { return { cls: cls, ref: ref, s: s, e: e, title: title, row: row }; }
    lanes.forEach(function (r) {
      var run = runs[r], upper = [], lower = [];
      run.iterations.forEach(function (it) {
        if (it.turn !== null) {
          var t = turns[it.turn];
          upper.push(bar("bar-turn", "turn:" + it.turn, t.s, t.e, "root turn " + t.it + " · " + secs(t.e - t.s) + " · " + tok(t.in, t.out), 0));
        }
        it.cells.forEach(function (c) {
          var cell = cells[c];
          upper.push(bar("bar-cell", "cell:" + c, cell.s, cell.e, "cell " + cell.it + "." + cell.i + " · " + secs(cell.e - cell.s), 0));
          cell.batches.forEach(function (b) {
            var x = batches[b];
            lower.push(bar("bar-batch", "batch:" + b, x.s, x.e, x.kind + " × " + x.count + " · " + secs(x.e - x.s), 1));
          });
        });
      });
      var row = [draw(upper), draw(lower)];
      html.push('<div class="lane" data-run="' + r + '"><div class="lane-label" style="padding-left:' + (4 + 12 * run.depth) + 'px">' +
        (run.depth ? "↳ " : "") + "<code>" + esc(String(run.id).slice(0, 8)) + "</code> d" + run.depth + '</div><div class="lane-track">' +
        row.join("") + "</div></div>");
    });
    var ticks = [];
    for (var i = 0; i <= 4; i++) ticks.push('<span style="left:' + (25 * i) + '%">' + secs(total * i / 4) + "</span>");
    window.__rlmBars = bars;
    return '<section id="timeline"><h2>Timeline</h2><div class="legend"><i class="bar-turn"></i>root turn <i class="bar-cell"></i>cell <i class="bar-batch"></i>sub-call batch</div>' +
      '<div class="axis"><div class="lane-label"></div><div class="ticks">' + ticks.join("") + "</div></div>" + html.join("") + "</section>";
  }

  // ---- the tree; every <details> is filled the first time it opens ----
  function runSummary(r) {
    var run = runs[r];
    var kind = run.route === "direct" ? "direct call " : run.depth ? "nested RLM " : "RLM ";
    var why = run.why && (run.route === "direct" || run.why.indexOf("refused") >= 0) ? " · " + esc(run.why) : "";
    return "<summary>" + kind + "<code>" + esc(String(run.id).slice(0, 8)) + "</code> · depth " +
      run.depth + " · " + esc(run.model) + why + " · " + badge(run.finish) + " · " + run.iterations.length + " iterations</summary>";
  }
  function runBody(r) {
    var run = runs[r], out = ['<div class="query"><b>Query</b> ' + esc(run.query || "") + "</div>"];
    run.iterations.forEach(function (it, k) {
      var t = it.turn !== null ? turns[it.turn] : null;
      out.push('<details class="iter" data-ref="iter:' + r + ":" + k + '"><summary>iteration ' + it.n +
        (t ? " · " + esc(t.model) + " · " + secs(t.e - t.s) + " · " + tok(t.in, t.out) + " · " + money(t.cost) : "") +
        " · " + plural(it.cells.length, "cell", "cells") + "</summary></details>");
    });
    if (run.response !== null) out.push('<div class="answer"><b>Answer</b> ' + esc(run.response) + "</div>");
    return out.join("");
  }
  function iterBody(r, k) {
    var it = runs[r].iterations[k], out = [];
    if (it.turn !== null) {
      var t = turns[it.turn];
      out.push('<div class="turn" data-ref="turn:' + it.turn + '"><div class="label">root model reply</div>' + pre("reply", t.reply) +
        '<details class="sent" data-ref="sent:' + it.turn + '"><summary>messages sent this turn (' + t.sent.length + ")</summary></details></div>");
    }
    it.cells.forEach(function (c) {
      var cell = cells[c];
      out.push('<details class="cell" data-ref="cell:' + c + '"><summary>' + (cell.running ? "cell (running)" : "cell " + cell.i) +
        " · " + secs(cell.e - cell.s) + (cell.batches.length ? " · " + plural(cell.batches.length, "sub-call batch", "sub-call batches") : "") +
        (cell.children.length ? " · " + plural(cell.children.length, "nested run", "nested runs") : "") + (cell.error ? ' · <span class="err">error</span>' : "") +
        (cell.final ? ' · <span class="badge ok">final</span>' : "") + "</summary></details>");
    });
    return out.join("");
  }
  function cellBody(c) {
    var cell = cells[c], out = ['<div class="label">code</div>' + pre("code", cell.code)];
    out.push('<div class="label">output</div>' + pre("output", cell.output || "(nothing printed)"));
    if (cell.error) out.push('<div class="label err">error</div>' + pre("error", cell.error));
    out.push('<div class="batches"></div>');
    cell.children.forEach(function (r) { out.push('<details class="run" data-ref="run:' + r + '">' + runSummary(r) + "</details>"); });
    return out.join("");
  }
  function batchHtml(b) {
    var x = batches[b], lat = calls.slice(x.first, x.first + x.count).filter(function (q) { return q.e !== null; })
      .map(function (q) { return q.d; }).sort(function (a, z) { return a - z; });
    var inT = 0, outT = 0, cost = 0;
    for (var i = x.first; i < x.first + x.count; i++) { inT += calls[i].in; outT += calls[i].out; cost += calls[i].cost; }
    return '<details class="batch" data-ref="batch:' + b + '"><summary>' + esc(x.kind) + " × " + x.count + " · " + esc(x.model) +
      (lat.length ? " · latency " + secs(lat[0]) + " / " + secs(lat[lat.length >> 1]) + " / " + secs(lat[lat.length - 1]) : "") +
      " · " + tok(inT, outT) + " · " + money(cost) + (x.errors ? ' · <span class="err">' + x.errors + " failed</span>" : "") +
      (x.finished < x.count ? " · " + (x.count - x.finished) + " running" : "") + '</summary><div class="calls"></div></details>';
  }
  // Draws more items into `box` (a cell's batches or a batch's calls).
  function page(box, selector, first, count, upTo, html, onMore) {
    // upTo 0 means "one more page"; otherwise draw just enough to include item upTo (1-based).
    var shown = box.querySelectorAll(selector).length;
    var end = Math.min(count, upTo ? Math.max(upTo, shown) : shown + PAGE);
    if (end <= shown) return;
    var more = box.querySelector(":scope > button.more");
    if (more) more.remove();
    var parts = [];
    for (var i = first + shown; i < first + end; i++) parts.push(html(i));
    box.insertAdjacentHTML("beforeend", parts.join(""));
    if (end < count) {
      var btn = el("button", "more", "show " + Math.min(PAGE, count - end) + " more of " + (count - end));
      btn.addEventListener("click", onMore);
      box.appendChild(btn);
    }
  }
  function showBatches(c, upTo) {
    var cell = cells[c], first = cell.batches.length ? cell.batches[0] : 0;
    page(node("cell:" + c).querySelector(".batches"), ":scope > details.batch", first, cell.batches.length, upTo, batchHtml,
      function () { showBatches(c, 0); });
  }
  function callHtml(i) {
    var q = calls[i];
    return '<div class="call" id="call-' + i + '" data-ref="call:' + i + '"><div class="label">call ' + (i - batches[q.b].first + 1) +
      (q.e !== null ? " · " + secs(q.d) + " · " + tok(q.in, q.out) : " · running") + "</div>" + pre("prompt", q.prompt) +
      (q.error ? pre("error", q.error) : pre("response", q.response === null ? "" : q.response)) + "</div>";
  }
  function showCalls(b, upTo) {
    var x = batches[b];
    page(node("batch:" + b).querySelector(".calls"), ":scope > .call", x.first, x.count, upTo, callHtml,
      function () { showCalls(b, 0); });
  }
  // Timeline bars carry the same refs as tree nodes, so lookups stay inside the tree.
  function node(ref) { return document.querySelector('#tree [data-ref="' + ref + '"]'); }
  function fill(d) {
    if (d.dataset.filled) return;
    d.dataset.filled = "1";
    var ref = d.dataset.ref.split(":"), kind = ref[0], n = +ref[1];
    if (kind === "batch") { showCalls(n, PAGE); return; }
    var html = kind === "run" ? runBody(n) : kind === "iter" ? iterBody(n, +ref[2]) : kind === "cell" ? cellBody(n)
      : kind === "sent" ? turns[n].sent.map(function (m) { return '<div class="label">' + esc(m.role) + "</div>" + pre("msg", m.content); }).join("") : "";
    d.insertAdjacentHTML("beforeend", '<div class="body">' + html + "</div>");
    if (kind === "cell") showBatches(n, PAGE);
  }
  document.addEventListener("toggle", function (ev) {
    var d = ev.target;
    if (d.tagName === "DETAILS" && d.open && d.dataset.ref) fill(d);
  }, true);

  // The chain of tree refs from the top run down to `ref`.
  function chain(ref) {
    var p = ref.split(":"), kind = p[0], n = +p[1];
    if (kind === "run") return runCell[n] === undefined ? [ref] : chain("cell:" + runCell[n]).concat([ref]);
    if (kind === "iter") return chain("run:" + n).concat([ref]);
    if (kind === "cell") return chain("iter:" + cellIter[n][0] + ":" + cellIter[n][1]).concat([ref]);
    if (kind === "turn") return chain("iter:" + turnIter[n][0] + ":" + turnIter[n][1]).concat([ref]);
    if (kind === "batch") return chain("cell:" + batches[n].cell).concat([ref]);
    if (kind === "call") return chain("batch:" + calls[n].b).concat([ref]);
    return [ref];
  }
  function reveal(ref) {
    var target = null;
    chain(ref).forEach(function (r) {
      var p = r.split(":");
      if (p[0] === "call") showCalls(calls[+p[1]].b, +p[1] - batches[calls[+p[1]].b].first + 1);
      if (p[0] === "batch") showBatches(batches[+p[1]].cell, cells[batches[+p[1]].cell].batches.indexOf(+p[1]) + 1);
      target = node(r);
      if (target && target.tagName === "DETAILS") { fill(target); target.open = true; }
    });
    if (target) {
      target.scrollIntoView({ block: "center" });
      target.classList.remove("flash");
      void target.offsetWidth;
      target.classList.add("flash");
    }
    return target;
  }

  // ---- search over prompts, replies, messages, code and outputs ----
  var index = null;
  function buildIndex() {
    index = [];
    function add(ref, label, text) { if (text) index.push({ ref: ref, label: label, text: String(text), low: String(text).toLowerCase() }); }
    runs.forEach(function (r, i) { add("run:" + i, "query of run " + String(r.id).slice(0, 8), r.query); add("run:" + i, "answer of run " + String(r.id).slice(0, 8), r.response); });
    turns.forEach(function (t, i) {
      add("turn:" + i, "root reply, iteration " + t.it, t.reply);
      t.sent.forEach(function (m) { add("turn:" + i, m.role + " message, iteration " + t.it, m.content); });
    });
    cells.forEach(function (c, i) { add("cell:" + i, "code, cell " + c.it + "." + c.i, c.code); add("cell:" + i, "output, cell " + c.it + "." + c.i, c.output); add("cell:" + i, "error, cell " + c.it + "." + c.i, c.error); });
    calls.forEach(function (q, i) { add("call:" + i, batches[q.b].kind + " prompt", q.prompt); add("call:" + i, batches[q.b].kind + " response", q.response); add("call:" + i, "sub-call error", q.error); });
  }
  function search(query) {
    var box = document.getElementById("results"), q = query.trim().toLowerCase();
    if (q.length < 2) { box.innerHTML = ""; return; }
    if (index === null) buildIndex();
    var hits = [], count = 0;
    for (var i = 0; i < index.length; i++) {
      var at = index[i].low.indexOf(q);
      if (at < 0) continue;
      count += 1;
      if (hits.length < MAX_HITS) {
        var t = index[i].text, a = Math.max(0, at - 60);
        hits.push('<li><button class="hit" data-ref="' + index[i].ref + '"><b>' + esc(index[i].label) + "</b> " + (a ? "…" : "") +
          esc(t.slice(a, at)) + "<mark>" + esc(t.slice(at, at + q.length)) + "</mark>" + esc(t.slice(at + q.length, at + q.length + 80)) + "</button></li>");
      }
    }
    box.innerHTML = '<div class="count">' + count + " match" + (count === 1 ? "" : "es") + (count > MAX_HITS ? " (first " + MAX_HITS + " shown)" : "") + "</div><ol>" + hits.join("") + "</ol>";
  }

  var app = document.getElementById("app");
  try {
    app.innerHTML = header() + summary() +
      '<section id="find"><input id="search" type="search" placeholder="Search prompts, replies, code and outputs" autocomplete="off"><div id="results"></div></section>' +
      timeline() + '<section id="tree"><h2>Runs</h2><details class="run" data-ref="run:0">' + runSummary(0) + "</details></section>";
    var top = node("run:0");
    fill(top);
    top.open = true;
  } catch (error) { broken("its data does not have the expected shape", error); return; }
  var timer = null;
  document.getElementById("search").addEventListener("input", function (ev) {
    clearTimeout(timer);
    var value = ev.target.value;
    timer = setTimeout(function () { search(value); }, 120);
  });
  app.addEventListener("click", function (ev) {
    var hit = ev.target.closest(".hit, .bar");
    if (hit) reveal(hit.dataset.ref);
  });
  window.rlmViewer = { reveal: reveal, search: search, bars: window.__rlmBars, rendered: performance.now() };
})();
