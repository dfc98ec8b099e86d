// raidd's dashboard, live: every second it reads /api/v1/status (the JSON of `raidd
// status --json`), redraws the banner, each array's rebuild progress and member table,
// and adds a point to each graph. IOPS, MB/s and p99 latency come from the exports' and
// LUNs' request counters and latency histograms (differences between two readings);
// cache hits from the stripe caches' and DMA-aligned buffers' hit counters.
"use strict";
(function () {
  const KEEP = 120; // points per graph: two minutes
  const t = [], iops = [], mbs = [], p99 = [], hits = [];
  let before = null;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // The journal's mode, and in write-back what its cache holds.
  function journalMode(j) {
    if (j.mode !== "write-back") return j.mode;
    return j.mode + ", " + human(j.cached_bytes) + " of " + human(j.cache_limit_bytes) + " held";
  }

  function human(b) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i ? b.toFixed(1) : b) + " " + u[i];
  }

  function duration(s) {
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }

  // Every array of the report: the outer ones (inner arrays of nested ones are not in
  // the JSON).
  function arrays(st) { return st.arrays.map((a) => a.status); }

  // Requests, bytes and the merged latency histogram of reads and writes everywhere.
  function totals(st) {
    const ops = [];
    for (const a of st.arrays) for (const e of a.exports) ops.push(...e.latency);
    if (st.iscsi) for (const tg of st.iscsi.targets) for (const l of tg.luns) ops.push(...l.latency);
    let count = 0, bytes = 0, buckets = null, bounds = [];
    for (const o of ops) {
      if (o.op === "flush") continue;
      count += o.count;
      bytes += o.bytes;
      if (!buckets) { buckets = o.buckets.slice(); bounds = o.bounds_us; }
      else o.buckets.forEach((n, i) => { buckets[i] += n; });
    }
    let h = 0;
    for (const a of arrays(st)) {
      const c = a.counters;
      if (c.stripe_cache) h += c.stripe_cache.hits;
      if (c.dab) for (const d of c.dab) h += d.hits;
    }
    return { at: performance.now() / 1000, count, bytes, buckets: buckets || [], bounds, hits: h };
  }

  // The 99th percentile (ms) of the requests between two readings, interpolated within
  // its bucket as Prometheus' histogram_quantile does; 0 without requests.
  function quantile(now, was, q) {
    const d = now.buckets.map((n, i) => n - (was.buckets[i] || 0));
    const total = d.reduce((x, y) => x + y, 0);
    if (total <= 0) return 0;
    const rank = q * total;
    let seen = 0;
    for (let i = 0; i < d.length; i++) {
      if (seen + d[i] >= rank) {
        const lo = i === 0 ? 0 : now.bounds[i - 1];
        const hi = i < now.bounds.length ? now.bounds[i] : lo * 2;
        return (lo + (hi - lo) * ((rank - seen) / d[i])) / 1000;
      }
      seen += d[i];
    }
    return now.bounds[now.bounds.length - 1] / 1000;
  }

  const charts = [];
  function chart(id, data, color) {
    const box = document.getElementById(id);
    if (!box || typeof uPlot === "undefined") return;
    const opts = {
      title: box.dataset.title,
      width: Math.max(300, box.clientWidth - 8),
      height: 150,
      scales: { x: { time: true } },
      legend: { show: false },
      series: [{}, { stroke: color, width: 2, fill: color + "22" }],
    };
    charts.push({ box, data, u: new uPlot(opts, [t, data], box) });
  }

  function draw() {
    for (const c of charts) {
      c.u.setData([t, c.data]);
      // What was drawn, for tests and scripts that read the page.
      c.box.dataset.points = String(t.length);
      c.box.dataset.last = String(c.data.length ? c.data[c.data.length - 1] : 0);
    }
  }

  function banner(st) {
    const b = document.getElementById("banner");
    if (!b) return;
    const lines = [];
    for (const a of arrays(st)) {
      const bad = a.slots.filter((s) => s.state !== "insync").length;
      if (a.state === "failed") lines.push(a.name + " has FAILED: too many members lost to serve every sector");
      else if (a.state === "degraded") {
        let l = a.name + " is degraded: " + bad + " of " + a.slots.length + " members not in sync";
        if (a.sync && a.sync.kind === "recovery") l += ", rebuild " + a.sync.percent.toFixed(1) + " % done";
        lines.push(l);
      }
      if (a.journal && a.journal.state !== "active")
        lines.push(a.name + " is read-only: its write journal is " + a.journal.state);
    }
    for (const n of st.not_started) lines.push(n.name + " was not started");
    b.className = lines.length ? "banner bad" : "banner ok";
    b.textContent = "";
    if (!lines.length) { b.textContent = "All arrays healthy"; return; }
    lines.forEach((l, i) => { if (i) b.appendChild(el("br")); b.appendChild(document.createTextNode(l)); });
  }

  const KIND = { recovery: "rebuild", resync: "resync", check: "check", repair: "repair", replace: "replace" };
  const SLOT = { insync: "in sync", recovering: "recovering", faulty: "failed", missing: "missing" };

  function section(a) {
    const sec = document.querySelector('section.array[data-array="' + CSS.escape(a.name) + '"]');
    if (!sec) return;
    const badge = sec.querySelector("h2 .badge");
    if (badge) { badge.className = "badge " + a.state; badge.textContent = a.state; }
    const journal = sec.querySelector(".journal .state");
    if (journal && a.journal) journal.textContent = a.journal.state;
    const mode = sec.querySelector(".journal .mode");
    if (mode && a.journal) mode.textContent = journalMode(a.journal);
    let sync = sec.querySelector(".sync");
    if (!a.sync) { if (sync) sync.remove(); }
    else {
      if (!sync) {
        sync = el("div", "sync");
        sync.append(el("span", "what"), " ", el("progress"), " ", el("span", "pct"), " · ",
          el("span", "speed"), " · ETA ", el("span", "eta"));
        sec.querySelector(".meta").after(sync);
      }
      const p = a.sync;
      sync.querySelector(".what").textContent = KIND[p.kind] + (p.member ? " onto " + p.member : "");
      const bar = sync.querySelector("progress");
      bar.max = Math.max(1, p.total_bytes);
      bar.value = p.done_bytes;
      sync.querySelector(".pct").textContent = p.percent.toFixed(1) + " %";
      sync.querySelector(".speed").textContent = human(p.speed_bytes_s) + "/s";
      sync.querySelector(".eta").textContent = p.eta_s == null ? "unknown" : duration(p.eta_s);
    }
    const rows = sec.querySelectorAll("table.members tr");
    a.slots.forEach((s, i) => {
      const r = rows[i + 1];
      if (!r) return;
      const c = r.children;
      r.className = s.state === "insync" ? "ok" : "bad";
      c[1].textContent = s.member || "—";
      c[2].textContent = SLOT[s.state];
      c[3].textContent = s.io.reads;
      c[4].textContent = s.io.writes;
      c[5].textContent = s.io.read_errors;
      c[6].textContent = s.io.write_errors;
      const err = s.io.read_errors + s.io.write_errors > 0;
      c[5].className = c[6].className = err ? "err" : "";
    });
  }

  function update(st) {
    const now = totals(st);
    if (before) {
      const dt = Math.max(0.001, now.at - before.at);
      t.push(Date.now() / 1000);
      iops.push((now.count - before.count) / dt);
      mbs.push((now.bytes - before.bytes) / dt / 1e6);
      p99.push(quantile(now, before, 0.99));
      hits.push((now.hits - before.hits) / dt);
      for (const s of [t, iops, mbs, p99, hits]) while (s.length > KEEP) s.shift();
      draw();
    }
    before = now;
    banner(st);
    for (const a of arrays(st)) section(a);
  }

  function tick() {
    fetch("/api/v1/status", { cache: "no-store" })
      .then((r) => r.json())
      .then(update)
      .catch(() => {
        const b = document.getElementById("banner");
        if (b) { b.className = "banner bad"; b.textContent = "No answer from raidd"; }
      });
  }

  chart("g-iops", iops, "#2f6fdb");
  chart("g-mbs", mbs, "#2f8a4c");
  chart("g-p99", p99, "#c77700");
  chart("g-hits", hits, "#7a3fc1");
  tick();
  setInterval(tick, 1000);
})();
