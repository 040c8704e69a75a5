// Draws a bitexact report from the JSON embedded in the page (script#bitexact-report): the
// same object as `--format json`. No libraries, no network; text goes in as text nodes only.
(function () {
  "use strict";
  var R = JSON.parse(document.getElementById("bitexact-report").textContent);
  var main = document.getElementById("bitexact");
  var SVG = "http://www.w3.org/2000/svg";

  // An element with attributes and children (strings become text nodes; null is skipped).
  function el(tag, attrs, kids, ns) {
    var e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    (kids || []).forEach(function (k) {
      if (k !== null && k !== undefined) e.appendChild(typeof k === "object" ? k : document.createTextNode(String(k)));
    });
    return e;
  }
  function s(tag, attrs, kids) { return el(tag, attrs, kids, SVG); }
  function card(title, kids, attrs) { return el("section", attrs || { "class": "card" }, [title ? el("h3", {}, [title]) : null].concat(kids)); }
  function table(id, head, rows) {
    return el("table", id ? { id: id } : {}, [head ? el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", {}, [h]); }))]) : null,
      el("tbody", {}, rows)]);
  }
  function row(cells, cls) {
    return el("tr", cls ? { "class": cls } : {}, cells.map(function (c) {
      return c && c.nodeType ? el("td", {}, [c]) : el("td", {}, [c === null || c === undefined ? "" : c]);
    }));
  }
  function badge(v) { return el("span", { "class": "badge v-" + v }, [v]); }
  function num(x) { return typeof x === "number" ? (Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : String(+x.toPrecision(6))) : "—"; }
  function secs(x) { return x < 1 ? (x * 1000).toFixed(0) + " ms" : x.toFixed(1) + " s"; }
  function note(text) { return el("p", { "class": "muted" }, [text]); }

  // --- Op traces: records aligned by identity, as bitexact aligns them. ---
  function keys(trace) {
    var seen = {};
    return trace.map(function (e) {
      var k = [e.rank || 0, e.thread || "", e.step || 0, e.phase || "", e.module || "", e.op].join("\u0001");
      seen[k] = (seen[k] || 0) + 1;
      return k + "#" + seen[k];
    });
  }
  // Each record of run 0 with its counterpart in the other run and how they compare.
  function aligned(c) {
    var t = c.traces || [];
    if (t.length < 2) return null;
    var j = Math.min(t.length - 1, (c.diff && c.diff[0] && c.diff[0].runs[1]) || 1);
    var ka = keys(t[0]), kb = keys(t[j]), index = {};
    kb.forEach(function (k, i) { index[k] = t[j][i]; });
    return { other: j, records: t[0].map(function (x, i) {
      var y = index[ka[i]];
      var status = !y ? "no counterpart" : x.algorithm !== y.algorithm ? "algorithm differs"
        : x.inputs.join() !== y.inputs.join() ? "inputs differ" : x.output !== y.output ? "output differs" : "identical";
      return { e: x, status: status };
    }) };
  }

  // --- The growth plot: outputs differing per step (bars), max ULP per step (line). ---
  function growth(c, i, al) {
    var g = c.divergence && c.divergence.growth, points, caption;
    if (g && g.length) {
      points = g.map(function (p) { return { step: p.step, n: p.differing, of: p.records, ulp: p.max_ulp }; });
      caption = "Bars: traced outputs that differ between the runs at each step; line: the largest ULP distance among them (log scale).";
    } else if (al) {
      var by = {};
      al.records.forEach(function (r) {
        var st = r.e.step || 0, p = by[st] || (by[st] = { step: st, n: 0, of: 0, cmp: 0, ulp: null });
        p.of += 1;
        if (r.status !== "no counterpart") p.cmp += 1;
        if (r.status !== "identical" && r.status !== "no counterpart") p.n += 1;
      });
      points = Object.keys(by).map(function (k) { return by[k]; }).sort(function (a, b) { return a.step - b.step; });
      points.forEach(function (p) { p.none = p.cmp === 0; });
      caption = "Bars: traced op outputs of run 0 that differ from run " + al.other + "'s at each step. The max ULP per step is not recorded in this report." +
        (points.some(function (p) { return p.none; }) ? " Grey: steps run " + al.other + " never reached (it was stopped at its first difference; --keep-going runs every step)." : "");
    } else {
      return card("How the difference grows", [note("No op trace in this report: run with --trace ops to see the difference grow step by step.")]);
    }
    var W = 560, H = 230, L = 44, Rm = 52, T = 12, B = 34, pw = W - L - Rm, ph = H - T - B;
    var maxN = Math.max.apply(null, points.map(function (p) { return p.n; }).concat([1]));
    var ulps = points.filter(function (p) { return typeof p.ulp === "number" && p.ulp > 0; });
    var maxL = Math.max.apply(null, ulps.map(function (p) { return Math.log2(p.ulp); }).concat([1]));
    var bw = pw / points.length, bar = Math.min(bw * 0.7, 56), kids = [];
    kids.push(s("line", { "class": "axis", x1: L, y1: T + ph, x2: L + pw, y2: T + ph }));
    kids.push(s("line", { "class": "axis", x1: L, y1: T, x2: L, y2: T + ph }));
    [0, maxN].forEach(function (v) { kids.push(s("text", { x: L - 6, y: T + ph - ph * v / maxN + 4, "text-anchor": "end" }, [String(v)])); });
    kids.push(s("text", { x: 12, y: T + ph / 2, transform: "rotate(-90 12 " + (T + ph / 2) + ")", "text-anchor": "middle" }, ["outputs differing"]));
    var line = [];
    points.forEach(function (p, k) {
      var h = ph * p.n / maxN, x = L + k * bw;
      if (p.none) h = ph;
      kids.push(s("rect", { "class": p.none ? "bar none" : p.n ? "bar" : "bar zero", x: x + (bw - bar) / 2, y: T + ph - Math.max(h, 1), width: bar, height: Math.max(h, 1) },
        [s("title", {}, [p.none ? "step " + p.step + ": not compared" : "step " + p.step + ": " + p.n + " of " + p.of + " outputs differ" + (p.ulp ? ", max " + p.ulp + " ULP" : "")])]));
      if (points.length <= 40 || k % Math.ceil(points.length / 20) === 0)
        kids.push(s("text", { x: x + bw / 2, y: T + ph + 14, "text-anchor": "middle" }, [String(p.step)]));
      if (typeof p.ulp === "number" && p.ulp > 0) line.push([x + bw / 2, T + ph - ph * Math.log2(p.ulp) / maxL]);
    });
    kids.push(s("text", { x: L + pw / 2, y: H - 4, "text-anchor": "middle" }, ["step"]));
    if (line.length) {
      kids.push(s("polyline", { "class": "line", points: line.map(function (p) { return p.join(","); }).join(" ") }));
      line.forEach(function (p) { kids.push(s("circle", { "class": "dot", cx: p[0], cy: p[1], r: 3 })); });
      kids.push(s("line", { "class": "axis", x1: L + pw, y1: T, x2: L + pw, y2: T + ph }));
      kids.push(s("text", { x: L + pw + 6, y: T + 4 }, ["2^" + Math.round(maxL)]));
      kids.push(s("text", { x: L + pw + 6, y: T + ph + 4 }, ["1 ULP"]));
    }
    return card("How the difference grows", [s("svg", { id: "growth-plot-" + i, "class": "growth-plot", viewBox: "0 0 " + W + " " + H, width: W, height: H }, kids),
      el("div", { "class": "legend" }, [el("span", { "class": "swatch", style: "background:#e0794a" }), "outputs differing",
        line.length ? el("span", { "class": "swatch", style: "background:#1f5fbf" }) : null, line.length ? "max ULP" : null]), note(caption)]);
  }

  // --- The op timeline around the first diverging op (columns empty throughout are left out). ---
  function timeline(c, i, al) {
    var d = c.divergence, rank = d.rank || 0;
    if (!al) return null;
    var mine = al.records.filter(function (r) { return (r.e.rank || 0) === rank; });
    var at = mine.findIndex(function (r) { return r.e.call === d.call && r.e.op === d.op; });
    if (at < 0) return null;
    var thread = mine[at].e.thread || "";
    var stream = mine.filter(function (r) { return (r.e.thread || "") === thread; });
    at = stream.indexOf(mine[at]);
    var lo = Math.max(0, at - 8), hi = Math.min(stream.length, at + 4);
    var head = ["call", "step", "phase", "op", "module", "source", "run 0 vs run " + al.other];
    var cells = stream.slice(lo, hi).map(function (r) {
      var e = r.e;
      return [String(e.call), String(e.step || 0), e.phase || "", e.op, e.module || "", e.source || "", r.status];
    });
    var used = head.map(function (h, k) { return k === 0 || k === 3 || k === 6 || cells.some(function (x) { return x[k]; }); });
    var wide = used.filter(Boolean).length, rows = [];
    var span = function (text, cls) { return el("tr", { "class": cls }, [el("td", { colspan: wide }, [text])]); };
    if (lo > 0) rows.push(span("… " + lo + " earlier op calls, identical in both runs up to here", "after"));
    cells.forEach(function (x, k) {
      var origin = lo + k === at, status = x[6];
      x[3] = el("code", origin ? { id: "first-op-" + i } : {}, [x[3]]);
      x[6] = el("span", { "class": "badge " + (status === "identical" ? "ok" : "bad") }, [origin && d.inputs_matched ? "origin: " + status : status]);
      rows.push(row(x.filter(function (v, n) { return used[n]; }), origin ? "origin" : lo + k > at ? "after" : ""));
    });
    (d.receivers || []).forEach(function (line) { rows.push(span("received on another rank: " + line, "receiver")); });
    return card("Op timeline around the first diverging op" + (d.rank !== undefined ? " (rank " + rank + ")" : ""),
      [table("timeline-" + i, head.filter(function (h, n) { return used[n]; }), rows)]);
  }

  // --- The first differing tensor: the captured op output, else the first differing output. ---
  function firstTensor(c, field) {
    var all = (c.captured || []).map(function (t) { return { t: t, captured: true }; })
      .concat((c.diff || []).map(function (t) { return { t: t, captured: false }; }));
    return all.find(function (x) { return x.t[field]; });
  }
  function tensorName(x, c) {
    return x.captured && c.divergence ? x.t.tensor + " of " + c.divergence.op + " (captured in a re-run)" : x.t.tensor;
  }
  function bucketLabel(k) { return k === 0 ? "0" : k === 1 ? "1" : k <= 4 ? Math.pow(2, k - 1) + "–" + (Math.pow(2, k) - 1) : "2^" + (k - 1); }
  function histogram(c, i) {
    var x = firstTensor(c, "ulp_histogram");
    if (!x) return card("ULP distance of the first differing tensor", [note("No float tensor was compared element by element.")]);
    var h = x.t.ulp_histogram, W = 560, H = 210, L = 44, T = 10, B = 40, pw = W - L - 12, ph = H - T - B;
    var max = Math.max.apply(null, h.concat([1])), bw = pw / h.length, bar = Math.min(bw * 0.8, 48), kids = [];
    var every = h.length <= 16 ? 1 : Math.ceil(h.length / 12), last = h.length - 1;
    kids.push(s("line", { "class": "axis", x1: L, y1: T + ph, x2: L + pw, y2: T + ph }));
    [0, max].forEach(function (v) { kids.push(s("text", { x: L - 6, y: T + ph - ph * v / max + 4, "text-anchor": "end" }, [String(v)])); });
    h.forEach(function (n, k) {
      var bh = ph * n / max, x0 = L + k * bw;
      kids.push(s("rect", { "class": n ? "bar" : "bar zero", x: x0 + (bw - bar) / 2, y: T + ph - Math.max(bh, 1), width: bar, height: Math.max(bh, 1) },
        [s("title", {}, [n + " elements at " + bucketLabel(k) + " ULP"])]));
      if (k === last || (k % every === 0 && k <= last - every))
        kids.push(s("text", { x: x0 + bw / 2, y: T + ph + 14, "text-anchor": "middle" }, [bucketLabel(k)]));
    });
    kids.push(s("text", { x: L + pw / 2, y: H - 6, "text-anchor": "middle" }, ["ULP distance (buckets of powers of two)"]));
    return card("ULP distance of the first differing tensor", [el("p", {}, [el("code", {}, [tensorName(x, c)]), ": " + x.t.elements_differing + " of " + x.t.elements +
      " elements differ, max " + x.t.max_ulp + " ULP"]), s("svg", { id: "ulp-histogram-" + i, viewBox: "0 0 " + W + " " + H, width: W, height: H }, kids)]);
  }
  function heatmap(c, i) {
    var x = firstTensor(c, "positions");
    if (!x) return card("Where its elements differ", [note("No tensor of one or more dimensions was compared element by element.")]);
    var p = x.t.positions, max = Math.max.apply(null, p.counts.concat([1]));
    var cw = Math.max(3, Math.min(28, Math.floor(440 / p.grid[1]), p.grid[0] === 1 ? 28 : Math.floor(384 / p.grid[0])));
    var ch = p.grid[0] === 1 ? 28 : cw, kids = [];
    p.counts.forEach(function (n, k) {
      var r = Math.floor(k / p.grid[1]), q = k % p.grid[1];
      var fill = n ? "hsl(" + (40 - 40 * n / max) + ",85%," + (80 - 42 * n / max) + "%)" : "#eef1f4";
      var span = function (cell, side) { return [Math.ceil(cell * p.view[side] / p.grid[side]), Math.ceil((cell + 1) * p.view[side] / p.grid[side]) - 1]; };
      var rr = span(r, 0), cc = span(q, 1);
      kids.push(s("rect", { "class": "cell", x: q * cw, y: r * ch, width: cw, height: ch, fill: fill },
        [s("title", {}, ["rows " + rr.join("–") + ", columns " + cc.join("–") + ": " + n + " differing"])]));
    });
    var W = cw * p.grid[1], H = ch * p.grid[0];
    return card("Where its elements differ", [el("p", {}, [el("code", {}, [tensorName(x, c)]), " viewed as " + p.view.join(" × ") + ", in " + p.grid.join(" × ") + " cells"]),
      s("svg", { id: "positions-" + i, viewBox: "0 0 " + W + " " + H, width: W, height: H }, kids),
      el("div", { "class": "legend" }, ["darker: more differing elements in the cell (most: " + max + "); grey: none"])]);
  }

  // --- Blame: the control and each variation tried alone, against the verdict. ---
  function blame(c, i) {
    var b = c.blame;
    if (!b) return card("Blame", [note(c.variations ? "No blame for this case." : "No blame: run with --vary (e.g. --vary all) to see which condition breaks it.")]);
    var ev = function (name) { return (b.evidence || []).filter(function (e) { return e.indexOf(name + ": ") === 0; }).map(function (e) { return e.slice(name.length + 2); }).join("; "); };
    var rows = [row([el("span", { "class": "nowrap" }, ["control (everything fixed)"]), el("span", { "class": "badge " + (b.reproducible_when_fixed ? "ok" : "bad") }, [b.reproducible_when_fixed ? "bit-exact" : "diverges"]), "", ev("control")])];
    (b.tried || []).forEach(function (v) {
      var breaks = b.broken_by.indexOf(v) >= 0, first = (b.first_ops || []).find(function (f) { return f[0] === v; });
      rows.push(row([el("span", { "class": "nowrap" }, [v + " varied alone"]), el("span", { "class": "badge " + (breaks ? "bad" : "ok") }, [breaks ? "breaks" : "bit-exact"]),
        first ? el("code", {}, [first[1]]) : "", ev(v)]));
    });
    return card("Blame: variations against verdicts", [table("blame-table-" + i, ["runs", "verdict", "first diverging op", "evidence"], rows),
      note(b.explanation)]);
  }

  function tensors(c) {
    var all = (c.captured || []).map(function (t) { return { t: t, captured: true }; })
      .concat((c.diff || []).map(function (t) { return { t: t, captured: false }; }));
    if (!all.length) return null;
    return card("Differing outputs", [table(null, ["output", "differing", "first at", "values", "max |Δ|", "max ULP"], all.map(function (x) {
      var t = x.t, name = el("code", {}, [tensorName(x, c)]);
      if (t.note) return el("tr", {}, [el("td", {}, [name]), el("td", { colspan: 5 }, [t.note])]);
      var nw = function (text) { return el("span", { "class": "nowrap" }, [text]); };
      return row([name, nw(t.elements_differing + " / " + t.elements), el("code", { "class": "nowrap" }, ["[" + t.first_index.join(",") + "]"]),
        t.first_values.join(" vs "), nw(num(t.max_abs)), nw(t.max_ulp === null || t.max_ulp === undefined ? "—" : String(t.max_ulp))]);
    }))]);
  }

  function platform(p, title, id) {
    var rows = Object.keys(p || {}).filter(function (k) { return p[k] !== null && p[k] !== ""; }).map(function (k) {
      return row([k, el("span", { "class": "mono" }, [typeof p[k] === "object" ? JSON.stringify(p[k]) : String(p[k])])]);
    });
    var t = table(id, null, rows);
    t.setAttribute("class", "kv");
    return rows.length ? card(title, [t]) : null;
  }

  function caseSection(c, i) {
    var al = aligned(c), d = c.divergence, kids = [el("h2", {}, [c.name + " [" + c.backend + "] ", badge(c.verdict)])];
    if (c.program) kids.push(el("p", {}, [el("code", {}, [c.program.command.join(" ")])]));
    if (d) kids.push(el("div", { "class": "explain", id: "divergence-" + i }, [d.explanation]));
    if (c.message) kids.push(el("p", {}, [c.message]));
    if (d || (c.diff || []).length) {
      kids.push(el("div", { "class": "grid" }, [growth(c, i, al), histogram(c, i)]));
      if (d) kids.push(timeline(c, i, al));
      kids.push(el("div", { "class": "grid wide-right" }, [heatmap(c, i), tensors(c) || card("Differing outputs", [note("none")])]));
    }
    kids.push(blame(c, i));
    var extra = (c.findings || []).map(function (f) { return "found: " + f; }).concat((c.notes || []).map(function (n) { return "note: " + n; }));
    if (c.memory_growth) extra.push("flag: " + c.memory_growth);
    if (extra.length) kids.push(card("Notes", [el("ul", { "class": "plain" }, extra.map(function (t) { return el("li", {}, [t]); }))]));
    if (c.program) kids.push(platform(c.program.platform, "The program's platform", null));
    return el("section", { "class": "case", id: "case-" + i }, kids);
  }

  // --- The page. ---
  var S = R.summary, counts = Object.keys(S).filter(function (k) { return S[k]; }).map(function (k) { return S[k] + " " + k.replace(/_/g, " "); });
  document.title = "bitexact: " + (counts.join(", ") || "no cases");
  main.appendChild(el("h1", {}, ["bitexact report"]));
  main.appendChild(el("p", { "class": "muted" }, [counts.join(" · ") + " — " + R.runs + " runs per case" +
    (R.variations ? ", varying " + R.variations.join(", ") : "") + ", seed " + R.controls.seed]));
  var detailed = R.cases.map(function (c) { return !!(c.divergence || (c.diff || []).length || c.blame || c.verdict === "error"); });
  main.appendChild(card("Verdicts", [table("verdicts", ["case", "backend", "verdict", "runs", "run 0 digest", "time", ""], R.cases.map(function (c, i) {
    var runs = c.distinct_digests > 1 ? c.runs + " (" + c.distinct_digests + " distinct)" : String(c.runs);
    var name = detailed[i] ? el("a", { href: "#case-" + i }, [c.name]) : c.name;
    return row([name, c.backend, badge(c.verdict), runs, el("code", {}, [(c.run_digests[0] || "").slice(0, 12)]), secs(c.seconds), c.message || ""]);
  }))]));
  R.cases.forEach(function (c, i) { if (detailed[i]) main.appendChild(caseSection(c, i)); });
  var plat = platform(R.platform, "Platform", "platform");
  if (plat) main.appendChild(plat);
})();
