// Small inline-SVG charts for the LoopX dashboard: no library, no network, works offline.
// Every chart is an <svg role="img"> with an aria-label that says what it shows in words, a
// <title> on every mark (the tooltip), and a text legend; colours come from the stylesheet's
// palette so they keep the page's contrast. Values are set as attributes, never as markup.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const OUTCOME_COLOURS = { ok: "#067647", partial: "#b54708", failed: "#b42318", open: "#2f5bd3", abandoned: "#667085" };
const LIMIT_COLOURS = { turns: "#2f5bd3", tokens: "#7a2e98", cost: "#b54708", wall_seconds: "#0e7090" };

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function tip(text) { return svg("title", {}, text); }

function frame(width, height, label) {
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": label,
    preserveAspectRatio: "xMinYMin meet", class: "chart-svg" });
}

function legend(entries) {
  const box = document.createElement("div");
  box.className = "legend";
  for (const [text, colour] of entries) {
    const item = document.createElement("span");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = colour; // CSSOM, allowed by the page's CSP
    item.append(swatch, document.createTextNode(text));
    box.append(item);
  }
  return box;
}

function empty(figure, text) {
  const p = document.createElement("p");
  p.className = "muted";
  p.textContent = text;
  figure.replaceChildren(p);
}

function shortTime(stamp) { return stamp ? stamp.slice(5, 16).replace("T", " ") : ""; }

// Budget burn-down: for each limit that is set, the share left after each run, against time.
function burnDown(figure, quota, usage, firstRun) {
  const limits = ["turns", "tokens", "cost", "wall_seconds"].filter((k) => quota.budget[k] !== null && quota.budget[k] !== undefined);
  if (!limits.length) return empty(figure, "No limits set: nothing to burn down (loopx quota set G --max-turns N …).");
  if (!usage.length) return empty(figure, "No runs yet: the whole budget is left.");
  const W = 420, H = 200, L = 40, R = 10, T = 10, B = 30;
  const times = usage.map((p) => Date.parse(p.at));
  // The line starts full when the first run in the window opened.
  const tStart = firstRun ? Math.min(Date.parse(firstRun.opened_at), times[0]) : times[0];
  // What the first run in the window charged: the line starts from what was used before it.
  const charge = { turns: 1, tokens: firstRun ? firstRun.tokens : 0, cost: firstRun ? firstRun.cost : 0,
    wall_seconds: firstRun && firstRun.finished_at ? firstRun.duration_seconds || 0 : 0 };
  const t0 = tStart, t1 = Math.max(...times);
  const x = (t) => (t1 === t0 ? L + (W - L - R) / 2 : L + ((t - t0) / (t1 - t0)) * (W - L - R));
  const y = (share) => T + (1 - Math.max(0, Math.min(1, share))) * (H - T - B);
  const chart = frame(W, H, `Budget burn-down: ${limits.map((k) => {
    const last = usage[usage.length - 1][k];
    return `${k.replace("_", " ")} ${last} of ${quota.budget[k]} used`;
  }).join("; ")}`);
  for (const share of [0, 0.5, 1]) {
    chart.append(svg("line", { x1: L, x2: W - R, y1: y(share), y2: y(share), class: "grid-line" }),
      svg("text", { x: L - 6, y: y(share) + 4, "text-anchor": "end", class: "axis" }, `${share * 100}%`));
  }
  chart.append(svg("text", { x: L, y: H - 8, class: "axis" }, shortTime(new Date(tStart).toISOString())),
    svg("text", { x: W - R, y: H - 8, "text-anchor": "end", class: "axis" }, shortTime(usage[usage.length - 1].at)));
  for (const k of limits) {
    const budget = quota.budget[k];
    const left = (p) => (budget <= 0 ? 0 : 1 - p[k] / budget);
    // From what was left when the first run opened, down run by run.
    const before = budget <= 0 ? 0 : 1 - Math.max(0, usage[0][k] - charge[k]) / budget;
    const pts = [[x(tStart), y(before)], ...usage.map((p, i) => [x(times[i]), y(left(p))])];
    chart.append(svg("polyline", { points: pts.map((p) => p.join(",")).join(" "), fill: "none",
      stroke: LIMIT_COLOURS[k], "stroke-width": 2, "data-limit": k }));
    usage.forEach((p, i) => chart.append(svg("circle", { cx: x(times[i]), cy: y(left(p)), r: 3, fill: LIMIT_COLOURS[k] },
      tip(`${k.replace("_", " ")}: ${p[k]} of ${budget} used after ${p.run_id} (${shortTime(p.at)})`))));
  }
  figure.replaceChildren(chart, legend(limits.map((k) => [`${k.replace("_", " ")} (limit ${quota.budget[k]})`, LIMIT_COLOURS[k]])));
}

// Run timeline: one bar per run, oldest left; height = duration, colour = outcome, label = evidence count.
function runTimeline(figure, runs) {
  if (!runs.length) return empty(figure, "No runs yet.");
  const W = 860, H = 190, L = 44, R = 10, T = 18, B = 34;
  const longest = Math.max(...runs.map((r) => r.duration_seconds || 0), 0.001);
  const slot = (W - L - R) / runs.length;
  const bw = Math.max(2, Math.min(40, slot * 0.7));
  const chart = frame(W, H, `Run timeline: ${runs.length} runs; ` + runs.slice(-5).map((r) =>
    `${r.id} ${r.outcome || r.state}, ${r.duration_seconds ?? "?"} s, ${r.evidence} evidence`).join("; "));
  chart.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "grid-line" }),
    svg("text", { x: L - 6, y: T + 4, "text-anchor": "end", class: "axis" }, `${longest < 10 ? longest.toFixed(1) : Math.round(longest)}s`),
    svg("text", { x: L - 6, y: H - B + 4, "text-anchor": "end", class: "axis" }, "0s"));
  runs.forEach((r, i) => {
    const kind = r.outcome || r.state;
    const h = Math.max(2, ((r.duration_seconds || 0) / longest) * (H - T - B));
    const cx = L + slot * i + slot / 2;
    const bar = svg("rect", { x: cx - bw / 2, y: H - B - h, width: bw, height: h, rx: 2,
      fill: OUTCOME_COLOURS[kind] || OUTCOME_COLOURS.open, "data-run-id": r.id, "data-outcome": kind },
    tip(`${r.id} · ${kind} · ${r.duration_seconds ?? "?"} s · ${r.evidence} evidence · ${r.agent} · opened ${shortTime(r.opened_at)}`));
    chart.append(bar);
    if (bw >= 10) chart.append(svg("text", { x: cx, y: H - B - h - 4, "text-anchor": "middle", class: "axis" }, r.evidence));
  });
  chart.append(svg("text", { x: L, y: H - 10, class: "axis" }, shortTime(runs[0].opened_at)),
    svg("text", { x: W - R, y: H - 10, "text-anchor": "end", class: "axis" }, shortTime(runs[runs.length - 1].opened_at)));
  const seen = [...new Set(runs.map((r) => r.outcome || r.state))];
  figure.replaceChildren(chart, legend(seen.map((k) => [k, OUTCOME_COLOURS[k] || OUTCOME_COLOURS.open])));
}

// Reward trend: each score in [-1, 1] as a dot, and the running mean as a line.
function rewardTrend(figure, rewards) {
  if (!rewards.length) return empty(figure, "No rewards yet (loopx reward add G --run-id R --score S).");
  const W = 420, H = 200, L = 34, R = 10, T = 10, B = 20;
  const x = (i) => (rewards.length === 1 ? L + (W - L - R) / 2 : L + (i / (rewards.length - 1)) * (W - L - R));
  const y = (s) => T + ((1 - s) / 2) * (H - T - B);
  const last = rewards[rewards.length - 1];
  const chart = frame(W, H, `Reward trend: ${rewards.length} rewards, running mean ${last.mean}, last score ${last.score}`);
  for (const s of [-1, 0, 1]) {
    chart.append(svg("line", { x1: L, x2: W - R, y1: y(s), y2: y(s), class: s === 0 ? "zero-line" : "grid-line" }),
      svg("text", { x: L - 6, y: y(s) + 4, "text-anchor": "end", class: "axis" }, s > 0 ? `+${s}` : s));
  }
  chart.append(svg("polyline", { points: rewards.map((w, i) => `${x(i)},${y(w.mean)}`).join(" "), fill: "none",
    stroke: "#2f5bd3", "stroke-width": 2, "data-series": "mean" }));
  rewards.forEach((w, i) => chart.append(svg("circle", { cx: x(i), cy: y(w.score), r: 4,
    fill: w.score > 0 ? OUTCOME_COLOURS.ok : w.score < 0 ? OUTCOME_COLOURS.failed : OUTCOME_COLOURS.abandoned,
    "data-score": w.score }, tip(`${w.score > 0 ? "+" : ""}${w.score} on ${w.run_id} (${shortTime(w.at)}); mean ${w.mean}`))));
  figure.replaceChildren(chart, legend([["score > 0", OUTCOME_COLOURS.ok], ["score < 0", OUTCOME_COLOURS.failed],
    ["running mean", "#2f5bd3"]]));
}

window.LoopxCharts = { burnDown, runTimeline, rewardTrend };
