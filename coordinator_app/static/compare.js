// parallel_rl compare view (the service's /): its runs, polled every 2 s; the ticked ones compared through
// GET /api/v1/compare (the numbers of `parallel-rl compare`): mean curves with 95 % bootstrap bands per group and
// the IQM table. No build step; uPlot from static/vendor.
"use strict";
const fmt = (x, digits = 2) => (x === null || x === undefined || Number.isNaN(x)) ? "–"
  : (typeof x === "number" ? (Number.isInteger(x) ? x.toLocaleString() : x.toFixed(digits)) : String(x));
const g6 = (x) => (x === null || x === undefined) ? "–" : String(Number(x.toPrecision(6)));  // the CLI's %.6g
const COLORS = ["#175cd3", "#f79009", "#12b76a", "#7a5af8", "#f04438", "#ee46bc", "#0e9384", "#667085"];
const ticked = new Set();
let shown = "", plot = null;  // the query drawn now, and its chart
let steps = "", compared = 0;  // the ticked runs' states and env steps when last compared, and when
let comparing = false;  // a GET /compare is in flight

function renderRuns(runs) {
  const body = $("runs").tBodies[0];
  body.replaceChildren();
  for (const r of runs) {
    const row = body.insertRow();
    row.dataset.runId = r.id;
    const box = row.insertCell().appendChild(document.createElement("input"));
    box.type = "checkbox";
    box.checked = ticked.has(r.id);
    box.addEventListener("change", () => {
      if (box.checked) ticked.add(r.id); else ticked.delete(r.id);
      refreshCompare();
    });
    cell(row, r.id);
    cell(row, r.name);
    cell(row, r.state, `state-${r.state}`);
    cell(row, fmt(r.env_steps));
    cell(row, fmt(r.last_eval_return));
  }
}

// every group on one x axis: the union of their grids, each group's series null where its grid has no point
function drawCurves(groups) {
  const xs = [...new Set(groups.flatMap((g) => g.curve.env_steps))].sort((a, b) => a - b);
  const data = [xs], series = [{label: "env steps"}], bands = [];
  groups.forEach((g, i) => {
    const color = COLORS[i % COLORS.length];
    const at = new Map(g.curve.env_steps.map((x, j) => [x, j]));
    const column = (key) => xs.map((x) => (at.has(x) ? g.curve[key][at.get(x)] : null));
    const first = data.length;
    data.push(column("mean"), column("high"), column("low"));
    series.push({label: `${g.name} (n=${g.runs.length})`, stroke: color, width: 2, spanGaps: true,
      points: {show: xs.length < 30}},
    {label: `${g.name} high`, stroke: color, width: 0, spanGaps: true, points: {show: false}},
    {label: `${g.name} low`, stroke: color, width: 0, spanGaps: true, points: {show: false}});
    bands.push({series: [first + 1, first + 2], fill: `${color}33`});
  });
  const el = $("curve-chart");
  if (plot) plot.destroy();
  plot = new uPlot({width: Math.max(300, el.clientWidth - 10), height: 300, scales: {x: {time: false}}, series, bands, legend: {live: false},
    axes: [{label: "env steps"}, {label: "eval return (mean, 95 % band)"}]}, data, el);
  // the legend names each group once: its band's edges are not listed
  const items = plot.root.querySelectorAll(".u-legend .u-series");
  const skip = items.length - (series.length - 1);  // 1 where the legend lists the x series too
  items.forEach((item, i) => {
    if (i >= skip && (i - skip) % 3 !== 0) item.style.display = "none";
  });
}
window.addEventListener("resize", () => plot && plot.setSize({width: Math.max(300, $("curve-chart").clientWidth - 10),
  height: 300}));

function renderTable(groups) {
  const body = $("iqm").tBodies[0];
  body.replaceChildren();
  for (const g of groups) {
    const row = body.insertRow();
    row.dataset.group = g.name;
    cell(row, g.name);
    cell(row, g.runs.map((r) => r.id).join(", "));
    cell(row, g6(g.iqm), "iqm");
    cell(row, `[${g6(g.ci[0])}, ${g6(g.ci[1])}]`, "ci");
    cell(row, g6(g.median));
    cell(row, g6(g.mean));
    cell(row, g.note);
  }
}

function clearCompare(error) {
  $("compare-error").textContent = error;
  renderTable([]);
  if (plot) { plot.destroy(); plot = null; }
  $("scored").textContent = "";
}

async function refreshCompare(force = false) {
  const runs = [...ticked].sort((a, b) => Number(a.split("-")[1]) - Number(b.split("-")[1]));
  const query = runs.length ? `runs=${runs.join(",")}&group=${$("group").value}` : "";
  if (query === shown && !force) return;
  shown = query;
  const csv = $("csv");
  csv.hidden = !query;
  csv.href = query ? `${API}/compare?${query}&format=csv` : "";
  if (!query) {
    clearCompare("");
    return;
  }
  // one comparison at a time (the service computes 2 at once and refuses a third with 429): ticks made while one is
  // computed are compared once it ends, as one selection
  if (comparing) return;
  comparing = true;
  try {
    let asked;
    do {
      asked = shown;
      try {
        const c = await get(`/compare?${asked}`);
        if (shown !== asked) continue;  // the selection changed while this one was computed
        drawCurves(c.groups);
        renderTable(c.groups);
        $("scored").textContent = `· final scores at env step ${fmt(c.env_step)} (${c.scored_at}); ` +
          `${c.reps} resamples`;
        $("compare-error").textContent = "";
        compared = Date.now();
        document.body.dataset.compared = asked;
      } catch (err) {
        if (shown === asked) clearCompare(err.message);  // nothing stale beside the one line that says why
      }
    } while (shown && shown !== asked);
  } finally {
    comparing = false;
  }
}

// the ticked runs that train are compared again as they go, at most every RECOMPARE_MS (a comparison costs the
// service CPU: up to a second at its caps)
const RECOMPARE_MS = 10000;
async function refresh() {
  try {
    const [{runs}, pool] = await Promise.all([get("/runs"), get("/pool")]);
    renderRuns(runs);
    $("pool").textContent = `${pool.learners} learner · ${pool.collectors} collector slots`;
    const now = runs.filter((r) => ticked.has(r.id)).map((r) => `${r.id}:${r.state}:${r.env_steps}`).join(" ");
    if (now !== steps && shown && Date.now() - compared > RECOMPARE_MS) {
      steps = now;
      compared = Date.now();
      await refreshCompare(true);
    }
    $("error").textContent = "";
    document.body.dataset.updated = String(Date.now());
  } catch (err) {
    $("error").textContent = `update failed: ${err.message}`;
  }
}

$("group").addEventListener("change", () => refreshCompare());
refresh();
setInterval(refresh, 2000);
