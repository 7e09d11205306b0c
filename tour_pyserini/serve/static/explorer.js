// The TOUR explorer: asks the server's /v1/{index}/explain route and draws what TOUR did. No build step, no
// library: the plot is SVG written here.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#d62728"];

function option(select, value, text) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = text || value;
  select.appendChild(o);
}

function element(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

class Unauthorised extends Error {}

// A server with API keys answers 401 without one: the page asks for the key and keeps it for this tab only.
async function getJson(url) {
  const key = sessionStorage.getItem("tour-pyserini-key");
  const response = await fetch(url, { headers: key ? { "X-API-Key": key } : {} });
  const body = await response.json();
  if (response.status === 401) throw new Unauthorised(body.error || response.statusText);
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function start() {
  try {
    await setUp();
  } catch (e) {
    if (!(e instanceof Unauthorised)) throw e;
    $("key-label").hidden = false;
    $("status").textContent = `${e.message}: enter this server's API key`;
    $("key").addEventListener("change", () => {
      sessionStorage.setItem("tour-pyserini-key", $("key").value);
      $("status").textContent = "";
      start();
    }, { once: true });
  }
}

async function setUp() {
  const { indexes } = await getJson("/v1/indexes");
  for (const index of indexes.filter((i) => i.kind === "dense")) option($("index"), index.name);
  const first = indexes.find((i) => i.kind === "dense");
  for (const teacher of first ? first.teachers : []) option($("teacher"), teacher);
  const { topics } = await getJson("/v1/topics");
  for (const topic of topics.slice(0, 500)) option($("topic"), topic.qid, `${topic.qid}: ${topic.text.slice(0, 90)}`);
  $("topic").addEventListener("change", () => {
    const topic = topics.find((t) => t.qid === $("topic").value);
    if (topic) $("query").value = topic.text;
  });
  $("query").addEventListener("input", () => { $("topic").value = ""; });
  $("form").addEventListener("submit", (event) => { event.preventDefault(); run(); });
  $("status").textContent = first ? "" : "this server has no dense index";
}

async function run() {
  const params = new URLSearchParams({
    query: $("query").value, teacher: $("teacher").value, rewriter: $("rewriter").value, depth: $("depth").value,
    iterations: $("iterations").value, lr: $("lr").value, hits: "10",
  });
  if ($("topic").value) params.set("qid", $("topic").value);
  $("status").textContent = "running…";
  try {
    const result = await getJson(`/v1/${encodeURIComponent($("index").value)}/explain?${params}`);
    draw(result);
    $("status").textContent = "done";
  } catch (e) {
    $("status").textContent = `error: ${e.message}`;
  }
}

function draw(result) {
  const trace = result.trace;
  const stop = trace.stop_reason ? `, stopped: ${trace.stop_reason}` : "";
  $("summary").textContent = `${result.rewriter} with teacher ${result.teacher}, depth = ${result.depth}: ` +
    `${trace.iterations} step(s), ${trace.teacher_calls} teacher calls${stop}.` +
    (result.relevance ? "" : " (No qrels for this query: pick an example of a server started with --qrels.)");
  drawPlot(result);
  drawColumns(result);
}

function isRelevant(result, docid) {
  return result.relevance !== null && (result.relevance[docid] || 0) > 0;
}

function drawPlot(result) {
  const stages = result.stages.map((s) => s.name);
  const paths = Object.entries(result.trajectories);
  const show = Math.max(...result.stages.map((s) => s.ranking.length), 1);
  const width = 180 * stages.length + 220, height = 28 + 16 * show + 40;
  const x = (i) => 80 + i * 180, y = (rank) => 24 + (rank - 1) * 16;
  const bottom = y(show) + 16;
  const svg = element("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
  svg.appendChild(element("title", {}, "Rank of each moved document at each stage (missing: below the shown depth)"));
  stages.forEach((name, i) => {
    svg.appendChild(element("line", { x1: x(i), y1: y(1) - 8, x2: x(i), y2: bottom, stroke: "#ddd" }));
    svg.appendChild(element("text", { x: x(i), y: height - 8, "text-anchor": "middle" }, name));
  });
  for (let rank = 1; rank <= show; rank += Math.max(1, Math.floor(show / 10))) {
    svg.appendChild(element("text", { x: 50, y: y(rank) + 4, "text-anchor": "end" }, String(rank)));
  }
  svg.appendChild(element("text", { x: 50, y: bottom + 4, "text-anchor": "end" }, `below ${show}`));
  paths.forEach(([docid, ranks], n) => {
    const points = ranks.map((r, i) => `${x(i)},${r === null ? bottom : y(r)}`).join(" ");
    const relevant = isRelevant(result, docid);
    const colour = relevant ? "#2a2" : COLOURS[n % COLOURS.length];
    const line = element("polyline", { points, stroke: colour, class: `trajectory${relevant ? " relevant" : ""}` });
    line.appendChild(element("title", {}, `${docid}: ${result.titles[docid] || ""}`));
    svg.appendChild(line);
    const last = ranks[ranks.length - 1];
    if (last !== null) {  // documents that fell below the shown depth share one spot: unlabelled
      svg.appendChild(element("text", { x: x(ranks.length - 1) + 6, y: y(last) + 4, fill: colour },
                              docid + (relevant ? " ✓" : "")));
    }
  });
  if (!paths.length) svg.appendChild(element("text", { x: 80, y: 40 }, "No document moved."));
  $("plot").replaceChildren(svg);
}

function column(result, title, ranking, judgments, firstRanks) {
  const div = document.createElement("div");
  div.className = "column";
  const h = document.createElement("h3");
  h.textContent = title;
  div.appendChild(h);
  const ol = document.createElement("ol");
  for (const { docid } of ranking.slice(0, 10)) {
    const li = document.createElement("li");
    const name = document.createElement("span");
    name.textContent = docid;
    if (isRelevant(result, docid)) name.className = "rel";
    li.appendChild(name);
    if (docid in judgments) {
      const label = document.createElement("span");
      label.className = "label";
      label.textContent = judgments[docid].toFixed(2);
      li.append(" ", label);
    }
    const before = firstRanks[docid], now = ranking.findIndex((d) => d.docid === docid) + 1;
    if (before !== now) {
      const move = document.createElement("span");
      move.className = before === undefined || before > now ? "up" : "down";
      move.textContent = before === undefined ? " ▲new" : before > now ? ` ▲${before - now}` : ` ▼${now - before}`;
      li.appendChild(move);
    }
    const text = document.createElement("span");
    text.className = "title";
    text.textContent = result.titles[docid] || "";
    li.appendChild(text);
    ol.appendChild(li);
  }
  div.appendChild(ol);
  return div;
}

function drawColumns(result) {
  const firstRanks = {};
  result.stages[0].ranking.forEach((d, i) => { firstRanks[d.docid] = i + 1; });
  const columns = result.stages.map((s) => column(result, s.name, s.ranking, result.judgments, firstRanks));
  if (result.rerank) {
    columns.push(column(result, `re-ranking the top ${result.rerank.depth} (same teacher calls)`,
                        result.rerank.ranking, result.rerank.judgments, firstRanks));
  }
  $("columns").replaceChildren(...columns);
}

start().catch((e) => { $("status").textContent = `error: ${e.message}`; });
