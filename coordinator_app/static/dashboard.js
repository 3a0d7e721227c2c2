// parallel_rl dashboard: polls the coordinator's REST API once a second; no build step.
"use strict";
const fmt = (x, digits = 1) => (x === null || x === undefined || Number.isNaN(x)) ? "–"
  : (typeof x === "number" ? (Number.isInteger(x) ? x.toLocaleString() : x.toFixed(digits)) : String(x));

function chart(el, series, yAxes, scales = {}) {
  const width = () => Math.max(300, el.clientWidth - 10);
  const plot = new uPlot({
    width: width(), height: 250, scales: {x: {time: false}, ...scales},
    axes: [{label: "seconds"}, ...yAxes],
    series: [{label: "t"}, ...series],
  }, [[], ...series.map(() => [])], el);
  window.addEventListener("resize", () => plot.setSize({width: width(), height: 250}));
  return plot;
}

// the y axis follows the returns; the stop value widens it only when it is near them (a stop value of
// 100000 would flatten a curve that is still at 200)
function evalRange(u) {
  const returns = u.data[1].filter((v) => Number.isFinite(v));
  if (!returns.length) return [0, 1];
  let lo = Math.min(0, ...returns), hi = Math.max(...returns);
  const stop = u.data[2][0];
  if (Number.isFinite(stop) && stop <= hi + 0.5 * Math.max(hi - lo, 1)) hi = Math.max(hi, stop);
  const pad = 0.05 * Math.max(hi - lo, 1);
  return [lo, hi + pad];
}
const evalChart = chart($("eval-chart"), [
  {label: "eval return", stroke: "#175cd3", width: 2, points: {show: true}},
  {label: "stop value", stroke: "#12b76a", dash: [6, 4]},
], [{label: "return"}], {y: {range: evalRange}});
const throughputChart = chart($("throughput-chart"), [
  {label: "env steps/s", stroke: "#f79009", width: 2, scale: "steps"},
  {label: "updates/s", stroke: "#7a5af8", width: 2, scale: "updates"},
], [{label: "env steps/s", scale: "steps"},
      {label: "updates/s", scale: "updates", side: 1, grid: {show: false}}]);

function renderSummary(c) {
  $("exp").textContent = `${c.exp_name} · ${c.env_id}`;
  const state = $("state");
  state.textContent = c.reason ? `${c.state}: ${c.reason}` : c.state;
  state.className = `badge ${c.state}`;
  $("eval").textContent = `${fmt(c.last_eval_return)} / ${fmt(c.stop_value, 0)}`;
  $("best").textContent = fmt(c.best_eval_return);
  $("env_steps").textContent = fmt(c.env_steps);
  $("train_iter").textContent = fmt(c.train_iter);
  $("policy_version").textContent = fmt(c.policy_version);
  $("uptime").textContent = `${fmt(c.uptime)} s`;
  // the shared store failing (disk full, I/O errors, object store down): say so until writes work again
  const s = c.storage, banner = $("storage-banner");
  banner.hidden = !s || s.healthy;
  banner.textContent = banner.hidden ? "" : `Shared store unhealthy since ` +
    `${s.since ? new Date(s.since * 1000).toLocaleTimeString() : "?"} (${s.workers.join(", ")}): ${s.error}`;
}

function renderRows(tableId, items, key, cells) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const item of items) {
    const row = body.insertRow();
    row.dataset[key] = item[key === "workerId" ? "worker_id" : "task_id"];
    for (const [text, cls] of cells(item)) cell(row, text, cls);
  }
}

function renderWorkers(workers) {
  renderRows("workers", workers, "workerId", (w) => [
    [w.worker_id], [w.kind], [w.state, `state-${w.state}`], [w.current_task || "–"],
    [`${fmt(w.seconds_since_heartbeat)} s`],
    [w.kind === "collector" ? `${fmt(w.env_steps)} steps` : `${fmt(w.train_iter)} iters`],
    [fmt(w.policy_version)], [w.address]]);
}

// where each worker's time goes (its heartbeats' time breakdown): a stacked bar per worker, a segment per phase
const PHASE_COLORS = {
  env_step: "#2e90fa", policy_forward: "#7a5af8", chunk_write: "#f79009", policy_load: "#ee46bc",
  evaluate: "#12b76a", waiting: "#d0d5dd", waiting_for_data: "#d0d5dd", train: "#175cd3", publishing: "#f04438",
  other: "#98a2b3"};
const ACTIVE = new Set(["connecting", "idle", "busy", "leaving"]);

function renderBreakdown(workers, bottleneck) {
  $("bottleneck").textContent = bottleneck ? `· bottleneck: ${bottleneck}` : "";
  const box = $("time-breakdown"), phases = new Set();
  box.replaceChildren();
  for (const w of workers) {
    const b = w.time_breakdown;
    if (!b || !ACTIVE.has(w.state)) continue;
    const row = box.appendChild(document.createElement("div"));
    row.className = "time-row";
    row.dataset.workerId = w.worker_id;
    row.appendChild(document.createElement("span")).textContent = w.worker_id;
    const bar = row.appendChild(document.createElement("div"));
    bar.className = "time-bar";
    for (const [phase, p] of Object.entries(b.phases)) {
      if (!(p.fraction > 0)) continue;
      const seg = bar.appendChild(document.createElement("span"));
      seg.className = "phase";
      seg.dataset.phase = phase;
      seg.style.width = `${(100 * p.fraction).toFixed(2)}%`;
      seg.style.background = PHASE_COLORS[phase] || "#667085";
      seg.title = `${phase}: ${fmt(p.seconds)} s (${(100 * p.fraction).toFixed(0)}%)`;
      phases.add(phase);
    }
    row.appendChild(document.createElement("span")).textContent = `${fmt(b.wall_seconds, 0)} s`;
  }
  const legend = $("time-legend");
  legend.replaceChildren();
  for (const phase of phases) {
    const item = legend.appendChild(document.createElement("span"));
    item.appendChild(document.createElement("i")).style.background = PHASE_COLORS[phase] || "#667085";
    item.appendChild(document.createTextNode(phase.replaceAll("_", " ")));
  }
}

function renderTasks(tasks) {
  renderRows("tasks", tasks.slice().reverse(), "taskId", (t) => [
    [t.task_id], [t.kind], [t.state, `state-${t.state}`], [t.worker_id || "–"], [t.attempts],
    [Object.entries(t.progress || {}).map(([k, v]) => `${k}=${fmt(v)}`).join(" ") || "–"], [t.error || ""]]);
}

function renderCharts(h) {
  const e = h.eval;
  evalChart.setData([e.map((p) => p.t), e.map((p) => p.eval_return), e.map(() => h.stop_value)]);
  const s = h.throughput;
  const t = [], steps = [], updates = [];
  for (let i = 1; i < s.length; i++) {
    const dt = s[i].t - s[i - 1].t;
    if (dt <= 0) continue;
    t.push(s[i].t);
    steps.push((s[i].env_steps - s[i - 1].env_steps) / dt);
    updates.push((s[i].train_iter - s[i - 1].train_iter) / dt);
  }
  throughputChart.setData([t, steps, updates]);
}

// two-player self-play: the payoff table as a heat map (green: the row player wins, red: it loses)
async function renderLeague() {
  const response = await fetch(`${API}/league`, {cache: "no-store"});
  if (response.status === 404) return;  // not a self-play run
  if (!response.ok) throw new Error(`/league: HTTP ${response.status}`);
  const league = await response.json();
  const players = league.players.filter((p) => p in league.payoff);
  const opponents = [...new Set(players.flatMap((p) => Object.keys(league.payoff[p])))];
  $("league-section").hidden = false;
  const head = $("league").tHead;
  head.replaceChildren();
  const hrow = head.insertRow();
  for (const name of ["", ...opponents]) hrow.appendChild(document.createElement("th")).textContent = name;
  const body = $("league").tBodies[0];
  body.replaceChildren();
  for (const p of players) {
    const row = body.insertRow();
    row.dataset.player = p;
    cell(row, p);
    for (const o of opponents) {
      const r = league.payoff[p][o];
      const td = cell(row, r ? `${fmt(r.win_rate, 2)} (${r.games})` : "–");
      if (r && r.win_rate !== null) {
        const score = (r.wins + r.draws / 2) / r.games;  // 0: always loses, 1: always wins
        td.style.background = `hsl(${Math.round(120 * score)}, 60%, 85%)`;
      }
    }
  }
}

// recorded evaluation episodes (policy.eval.evaluator.record_every): the newest plays beside the eval chart
async function renderVideo() {
  const {videos} = await get("/videos");
  if (!videos.length) return;
  const newest = videos[0], video = $("episode-video");
  if (video.dataset.name !== newest.name) {
    video.dataset.name = newest.name;
    video.src = `${API}/videos/${encodeURIComponent(newest.name)}`;
    $("video-caption").textContent = `policy v${newest.policy_version}`;
  }
  $("video-panel").hidden = false;
}

async function refresh() {
  try {
    const [c, collectors, learners, tasks, history] = await Promise.all([
      get("/cluster"), get("/collectors"), get("/learners"), get("/tasks?limit=1000"), get("/cluster/history")]);
    renderSummary(c);
    const workers = [...learners.learners, ...collectors.collectors];
    renderWorkers(workers);
    renderBreakdown(workers, c.bottleneck);
    renderTasks(tasks.tasks.slice(-20));
    renderCharts(history);
    await renderLeague();
    await renderVideo();
    $("error").textContent = "";
    document.body.dataset.updated = String(Date.now());
  } catch (err) {
    $("error").textContent = `update failed: ${err.message}`;
  }
}

refresh();
setInterval(refresh, 1000);
