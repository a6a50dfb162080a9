// The LoopX dashboard: renders the status projection (/api/status, /api/goals/{id}) and
// re-reads it whenever /api/stream reports a new registry revision. Read-only: it only GETs.
// Every value from the registry goes into the page as text (textContent), never as markup.
"use strict";

const PAGE = 50;
const SLOW_REFRESH_MS = 30000; // time alone changes some facts (leases, abandoned runs)
const state = { selected: null, shown: PAGE, next: null, revision: null, loading: false, again: false,
  includeClosed: false };

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function badge(text, kind) {
  return el("span", { class: `badge ${kind || text}` }, text);
}

function fmt(value) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number" && !Number.isInteger(value)) return value.toFixed(value < 10 ? 3 : 1);
  return String(value);
}

function when(stamp) {
  return stamp ? stamp.replace("T", " ").replace(/\.\d+Z$/, "Z") : "";
}

async function getJSON(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
  const data = await response.json();
  if (!response.ok) {
    const err = new Error((data.error && data.error.message) || response.statusText);
    err.code = data.error && data.error.code;
    throw err;
  }
  return data;
}

// ---------------------------------------------------------------- goal list

function renderOverview(view) {
  const g = view.counts.goals;
  $("counts").textContent =
    `${g.open} open · ${g.paused} paused · ${g.closed} closed · ${view.counts.attention} need you`;
  $("revision").textContent = `revision ${view.revision}`;
  const list = $("goals");
  list.replaceChildren(...view.goals.map(goalItem));
  state.next = view.page.next;
  $("more").hidden = !state.next;
  // "No goals yet" only when there are none at all; closed ones hidden by the toggle are said so.
  const total = g.open + g.paused + g.closed;
  $("no-goals").hidden = total > 0;
  const onlyClosed = !view.goals.length && g.closed > 0 && !state.includeClosed;
  $("only-closed").hidden = !onlyClosed;
  $("only-closed").textContent = onlyClosed
    ? `No open or paused goals; ${g.closed} closed goal${g.closed > 1 ? "s are" : " is"} hidden — tick “Show closed goals”.` : "";
  renderWorkers(view.workers || [], view.clock_jumps || []);
  if (!state.selected && view.goals.length) select(view.goals[0].id, false);
  markSelected();
}

// Heartbeats of `loopx worker` processes: which run, which died, what they work on.
function renderWorkers(workers, jumps) {
  const shown = workers.filter((w) => w.state !== "stopped");
  const parts = shown.map((w) => `worker ${w.id} ${w.state} (pid ${w.pid} on ${w.host}, beat ${when(w.last_beat_at)}` +
    (w.goals.length ? `, on ${w.goals.join(", ")})` : ", idle)"));
  if (jumps.length) parts.push(`clock jump ${jumps[0].direction} ${Math.round(Math.abs(jumps[0].jump_seconds))}s`);
  $("workers").textContent = parts.join(" · ") || "no worker running";
  $("workers").dataset.states = shown.map((w) => w.state).join(",");
}

// A goal waiting for a person: the decision, the reason, and the exact commands to type.
function needsYouBlock(needs) {
  return el("div", { class: "needs-you-body", "data-reason": needs.reason },
    el("strong", {}, `Needs you: ${needs.decision} (${needs.reason.replaceAll("_", " ")})`),
    el("div", { class: "small" }, needs.message),
    ...(needs.decisions || []).map((d) => el("div", { class: "small approving" },
      `Gate ${d.gate_id} (${d.title}): approving ${d.approving}`)),
    ...needs.commands.map((c) => el("div", { class: "command" }, el("code", {}, c), copyButton(c, "Copy the command"))));
}

function goalItem(goal) {
  const todos = goal.todos;
  const total = todos.open + todos.done + todos.blocked;
  const meta = [`${todos.done}/${total} todos done`];
  if (goal.gates_pending) meta.push(`${goal.gates_pending} gate${goal.gates_pending > 1 ? "s" : ""} pending`);
  if (goal.last_run) meta.push(`last run ${goal.last_run.outcome || goal.last_run.state}`);
  const item = el(
    "li",
    { class: goal.needs_you ? "attention" : "", tabIndex: 0, "data-goal-id": goal.id },
    el("span", { class: "title" }, goal.title),
    badge(goal.status),
    " ",
    ...goal.attention.map((a) => badge(a.replace("_", " "), "warn")),
    goal.needs_you ? badge(`needs you: ${goal.needs_you.reason.replaceAll("_", " ")}`, "warn needs") : null,
    el("div", { class: "meta" }, meta.join(" · ")),
    goal.needs_you && goal.needs_you.commands.length ? el("code", { class: "small needs-command" },
      goal.needs_you.commands[0]) : null,
  );
  item.addEventListener("click", () => select(goal.id, true));
  item.addEventListener("keydown", (e) => { if (e.key === "Enter") select(goal.id, true); });
  return item;
}

function markSelected() {
  for (const li of $("goals").children) li.classList.toggle("selected", li.dataset.goalId === state.selected);
}

function select(goalId, userChose) {
  state.selected = goalId;
  if (userChose) history.replaceState(null, "", `#${goalId}`);
  markSelected();
  loadGoal();
}

// ---------------------------------------------------------------- one goal

function renderGoal(view) {
  const goal = view.goal;
  $("pick").hidden = true;
  $("goal").hidden = false;
  $("goal").dataset.goalId = goal.id;
  $("goal-title").textContent = goal.title;
  $("goal-status").replaceWith(Object.assign(badge(goal.status), { id: "goal-status" }));
  $("goal-id").textContent = `${goal.id} · revision ${goal.revision}` +
    ((goal.capabilities || []).length ? ` · uses ${goal.capabilities.join(", ")}` : "");
  const ws = view.workspace;
  $("goal-workspace").textContent = ws ? `workspace ${ws.workspace}` + (ws.branch ? ` · branch ${ws.branch}` : "") +
    (ws.exists ? "" : " (made by its next turn)") + (ws.project ? ` · project ${ws.project}` : "") : "";
  $("goal-description").textContent = goal.description || "";
  $("goal-attention").replaceChildren(...view.attention.map((a) => el("li", {}, badge(a.replace("_", " "), "warn"))));
  const needs = view.needs_you;
  $("needs-you").hidden = !needs;
  $("needs-you").replaceChildren(...(needs ? [needsYouBlock(needs)] : []));
  const now = view.current_contract;
  $("decision-now").textContent = now ? `Decision now: ${now.decision} (${now.reasons.join(", ")}) — ${now.primary_action}` : "";
  $("goal-criteria").replaceChildren(...goal.criteria.map((c) => el("li", {}, c.met ? "✔ " : "☐ ", c.text)));

  const gates = [...view.gates.pending, ...view.gates.decided];
  $("gates").replaceChildren(
    ...(gates.length ? gates.map((x) => el("li", { "data-gate-id": x.id, "data-status": x.status },
      badge(x.status), " ", el("strong", {}, x.title), " ",
      el("span", { class: "muted small" }, `${x.scope} · blocks ${x.blocks}` +
        (x.decided_by ? ` · ${x.status} by ${x.decided_by} ${when(x.decided_at)}` : ` · asked by ${x.requested_by}`)),
      x.comment ? el("div", { class: "muted small" }, x.comment) : null,
      ...(view.artifacts || []).filter((a) => a.gate_id === x.id).map((a) => artifactShown(goal.id, a)),
      x.decide ? decideBlock(x.decide) : null))
      : [el("li", { class: "muted" }, "no gates")]),
  );
  renderContract(view.last_contract);
  const h = view.history || { runs: [], usage: [], rewards: [] };
  if (window.LoopxCharts) {
    LoopxCharts.burnDown($("burndown"), view.quota, h.usage, h.runs[0] || null);
    LoopxCharts.runTimeline($("run-timeline"), h.runs);
    LoopxCharts.rewardTrend($("reward-trend"), h.rewards);
  }

  renderQuota(view.quota);

  const ready = new Set(view.todos.ready);
  const c = view.todos.counts;
  $("todo-counts").textContent = `${c.done} done · ${c.open} open (${ready.size} ready) · ${c.blocked} blocked`;
  $("todos").tBodies[0].replaceChildren(
    ...view.todos.items.map((t) => {
      const st = ready.has(t.id) ? "ready" : t.status;
      const claim = t.claim ? `${t.claim.agent}${t.claim.valid ? "" : " (expired)"}` : "";
      return el("tr", { "data-todo-id": t.id }, el("td", {}, el("code", {}, t.id)), el("td", {}, t.priority),
        el("td", {}, badge(st, st === "open" ? "" : st === "done" ? "ok" : st === "blocked" ? "bad" : st)),
        el("td", {}, t.text, t.blocked_by ? el("div", { class: "muted small blocked-by" }, t.blocked_by.text) : null),
        el("td", { class: "muted" }, claim));
    }),
  );

  $("handoff").textContent = view.handoff ? `${view.handoff.note}\n— ${view.handoff.run_id}, ${when(view.handoff.at)}` : "none yet";
  $("handoff").classList.toggle("muted", !view.handoff);
  const arts = view.artifacts || [];
  $("artifacts").replaceChildren(
    ...(arts.length ? arts.map((a) => el("li", { "data-artifact": a.name },
      artifactLink(goal.id, a), " ", el("span", { class: "muted small" }, `sha256 ${a.sha256}`),
      el("div", { class: "muted small" }, a.path),
      a.ok ? null : el("div", { class: "bad small" }, `TAMPERED: ${a.problem}`)))
      : [el("li", { class: "muted" }, "nothing recorded for review")]),
  );

  $("reward-mean").textContent = view.rewards.total ? `mean ${fmt(view.rewards.mean)} over ${view.rewards.total}` : "";
  $("rewards").replaceChildren(
    ...(view.rewards.recent.length ? view.rewards.recent.map((w) => el("li", {},
      badge((w.score >= 0 ? "+" : "") + w.score, w.score > 0 ? "ok" : w.score < 0 ? "bad" : ""), " ",
      w.comment || "", el("div", { class: "muted small" }, `${w.run_id} · ${w.author} · ${when(w.created_at)}`)))
      : [el("li", { class: "muted" }, "no rewards yet")]),
  );

  $("timeline").replaceChildren(
    ...(view.timeline.length ? view.timeline.map((i) => el("li", { "data-kind": i.kind },
      el("span", { class: "muted" }, when(i.at)), el("span", {}, i.kind), el("span", {}, i.text,
        i.run_id ? el("span", { class: "muted small" }, ` (${i.run_id})`) : null)))
      : [el("li", { class: "muted" }, "no runs yet")]),
  );

  $("actions").replaceChildren(
    ...(view.actions.length ? view.actions.map((a) => el("li", {}, el("strong", {}, a.name), " ",
      el("code", {}, a.argv.join(" ")), el("span", { class: "muted small" }, ` · ${a.source}`)))
      : [el("li", { class: "muted" }, "no actions")]),
  );
}

// An artifact's read-only view (served as plain text, only while its sha256 matches).
function artifactURL(goalId, a) {
  return `/api/goals/${encodeURIComponent(goalId)}/artifacts/${encodeURIComponent(a.name)}`;
}

function artifactLink(goalId, a) {
  return el("a", { href: artifactURL(goalId, a), target: "_blank", rel: "noopener noreferrer" }, `view ${a.name}`);
}

// What a gate is decided on (a diff of changed tests): fetched as text, shown as text (never markup).
function artifactShown(goalId, a) {
  const pre = el("pre", { class: "artifact-text small" }, a.ok ? "loading…" : `TAMPERED: ${a.problem}`);
  if (a.ok) {
    fetch(artifactURL(goalId, a), { headers: { Accept: "text/plain" } })
      .then((r) => r.ok ? r.text() : r.json().then((e) => `not shown: ${e.error.message}`))
      .then((text) => { pre.textContent = text; })
      .catch((err) => { pre.textContent = `not shown: ${err}`; });
  }
  return el("details", { class: "gate-artifact", open: true, "data-artifact": a.name },
    el("summary", { class: "small" }, `${a.name} · sha256 ${a.sha256.slice(0, 16)}… `, artifactLink(goalId, a)), pre);
}

// The exact commands that decide a pending gate (user only), each with a copy button.
function decideBlock(decide) {
  return el("div", { class: "decide" }, el("div", { class: "small" }, "Decide it from a terminal (user only):"),
    ...["approve", "reject"].map((verb) => el("div", { class: "command" },
      el("code", { "data-verb": verb }, decide[verb]), copyButton(decide[verb], `Copy the ${verb} command`))));
}

function copyButton(text, label) {
  const button = el("button", { type: "button", class: "copy", title: label }, "Copy");
  button.setAttribute("aria-label", label);
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch (err) {
      button.textContent = "Select and copy";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
  return button;
}

function renderContract(c) {
  if (!c) {
    $("contract-meta").textContent = "";
    $("contract").replaceChildren(el("p", { class: "muted" }, "No contract issued yet: it is filed when should-run opens a run."));
    return;
  }
  $("contract-meta").textContent = `${c.contract_id} · run ${c.run_id || "–"} · ${when(c.issued_at)}`;
  $("contract").replaceChildren(...[
    el("p", {}, "decision ", badge(c.decision, c.decision === "run" ? "ok" : "warn"),
      c.reasons.length ? " because " : "", ...c.reasons.map((r) => badge(r, "plain"))),
    c.primary_action ? el("p", { class: "primary" }, c.primary_action) : null,
    el("ol", { class: "steps" }, ...c.steps.map((s) => el("li", {}, el("code", {}, s.command || s.argv || JSON.stringify(s)),
      s.why ? el("span", { class: "muted small" }, ` — ${s.why}`) : null))),
    c.next_user_actions.length ? el("div", { class: "small" }, "for a user: ",
      ...c.next_user_actions.map((a) => el("code", { class: "user-action" }, a))) : null,
  ].filter(Boolean));
}

function fill(share) {
  const node = el("div", { class: "fill" });
  node.style.width = `${(share * 100).toFixed(1)}%`; // CSSOM, allowed by the page's CSP
  return node;
}

function renderQuota(q) {
  const bars = [];
  for (const field of ["turns", "tokens", "cost", "wall_seconds"]) {
    const budget = q.budget[field];
    const used = q.used[field];
    if (budget === null && !used) continue;
    const share = budget === null ? 0 : budget <= 0 ? 1 : Math.min(1, used / budget);
    const exhausted = q.exhausted.includes(field);
    bars.push(el("div", { class: `bar${exhausted ? " exhausted" : ""}`, "data-field": field },
      el("div", { class: "label" }, el("span", {}, field.replace("_", " ")),
        el("span", {}, budget === null ? `${fmt(used)} used · unlimited`
          : `${fmt(used)} / ${fmt(budget)} · ${fmt(q.remaining[field])} left`)),
      el("div", { class: "track" }, fill(share))));
  }
  if (q.limits.cadence_seconds) bars.push(el("div", { class: "muted small" }, `at most one turn every ${q.limits.cadence_seconds}s`));
  $("quota").replaceChildren(...(bars.length ? bars : [el("p", { class: "muted" }, "no limits set")]));
}

// ---------------------------------------------------------------- loading

async function loadOverview() {
  const all = state.includeClosed ? "&all=1" : "";
  const view = await getJSON(`/api/status?limit=${Math.min(1000, state.shown)}${all}`);
  state.revision = view.revision;
  renderOverview(view);
}

async function loadGoal() {
  if (!state.selected) return;
  const wanted = state.selected;
  try {
    const view = await getJSON(`/api/goals/${encodeURIComponent(wanted)}`);
    if (state.selected === wanted) renderGoal(view);
  } catch (err) {
    if (err.code === "goal_not_found" || err.code === "invalid_argument") {
      state.selected = null;
      $("goal").hidden = true;
      $("pick").hidden = false;
    } else throw err;
  }
}

// Pages capabilities serve on ports of their own (GET /api/pages): a link to each.
async function loadPages() {
  try {
    const { pages } = await getJSON("/api/pages");
    $("pages").replaceChildren(...pages.map((p) =>
      el("a", { href: p.url, target: "_blank", rel: "noopener", "data-capability": p.capability },
        `${p.title || p.capability} ↗`)));
  } catch (err) { /* the link is optional; the dashboard stays as it is */ }
}

// Refreshes never overlap: a change that arrives mid-load triggers one more load afterwards.
async function refresh() {
  if (state.loading) { state.again = true; return; }
  state.loading = true;
  try {
    do {
      state.again = false;
      await loadOverview();
      await loadGoal();
      await loadPages();
    } while (state.again);
  } catch (err) {
    $("counts").textContent = `error: ${err.message}`;
  } finally {
    state.loading = false;
  }
}

function connect() {
  if (!window.EventSource) return;
  const source = new EventSource("/api/stream");
  source.addEventListener("open", () => { $("live").textContent = "live"; $("live").className = "live on"; });
  source.addEventListener("error", () => { $("live").textContent = "reconnecting…"; $("live").className = "live off"; });
  // One event on connecting, then one per change of the registry: re-read the views each time
  // (refreshes coalesce, so a burst of changes costs at most two reads).
  source.addEventListener("revision", () => refresh());
}

$("more").addEventListener("click", () => { state.shown += PAGE; refresh(); });
$("show-closed").addEventListener("change", (e) => { state.includeClosed = e.target.checked; refresh(); });
window.addEventListener("hashchange", () => {
  const id = location.hash.slice(1);
  if (id && id !== state.selected) select(id, false);
});
if (location.hash.length > 1) state.selected = location.hash.slice(1);
refresh();
connect();
setInterval(refresh, SLOW_REFRESH_MS);
