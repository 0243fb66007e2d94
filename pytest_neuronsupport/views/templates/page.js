"use strict";
(() => {
  // The rows arrive as JSON data; every value goes into the page through textContent only.
  const data = JSON.parse(document.getElementById("page-data").textContent);
  const explorer = document.getElementById("explorer");
  if (!explorer) {
    return; // an empty dataset: nothing to explore
  }
  const rows = data.rows;
  const slugs = new Map(data.results.map((entry) => [entry.value, entry.slug]));
  const state = { view: "all", search: "", result: "", pair: "", task: "" };
  const byId = (id) => document.getElementById(id);
  const table = byId("rows-table");
  const dialog = byId("detail");
  let current = null;

  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) {
      node.className = className;
    }
    for (const child of children) {
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function number(value) {
    return String(Number(value.toPrecision(3)));
  }

  function seconds(value) {
    if (value === null) {
      return "—";
    }
    if (value < 60) {
      return `${value.toFixed(1)} s`;
    }
    const minutes = Math.floor(value / 60);
    if (minutes < 60) {
      return `${minutes} min ${Math.round(value % 60)} s`;
    }
    return `${Math.floor(minutes / 60)} h ${minutes % 60} min`;
  }

  function memoryText(row) {
    if (row.hbm_peak_gb === null) {
      return "—";
    }
    const peak = number(row.hbm_peak_gb);
    return row.hbm_capacity_gb ? `${peak} / ${number(row.hbm_capacity_gb)} GB` : `${peak} GB`;
  }

  function memoryCell(row) {
    const cell = el("td", "memory-cell");
    const wrap = el("span", "memory");
    if (row.hbm_peak_gb !== null && row.hbm_capacity_gb) {
      const share = Math.min(1, row.hbm_peak_gb / row.hbm_capacity_gb);
      const fill = el("span");
      fill.style.width = `${(share * 100).toFixed(1)}%`;
      const meter = el("span", share > 0.9 ? "meter high" : "meter", fill);
      meter.title = `${(share * 100).toFixed(0)}% of capacity`;
      wrap.append(meter);
    }
    wrap.append(memoryText(row));
    cell.append(wrap);
    return cell;
  }

  function badge(result) {
    return el("span", `badge res-${slugs.get(result) || "other"}`, result);
  }

  function resultCell(row) {
    // what the row's own columns add to its result: "PASS compiled nothing" (no graph was
    // compiled: not a compiler PASS), "PASS, 3 operators on the CPU"
    const extra = [];
    if (row.result === "PASS" && row.compiled === false) {
      extra.push(" compiled nothing");
    }
    const ops = row.cpu_ops || [];
    if (ops.length > 0) {
      extra.push(`, ${ops.length} operator${ops.length === 1 ? "" : "s"} on the CPU`);
    }
    return extra.length > 0 ? el("span", null, badge(row.result), ...extra) : badge(row.result);
  }

  function pairCell(pair) {
    // wraps only between the compiler and the library
    const [compiler, library] = pair.split(" / ");
    return el("td", "pair", el("span", null, compiler), " / ", el("span", null, library));
  }

  function dash(value) {
    return value === null || value === "" ? "—" : String(value);
  }

  function rowElement(row) {
    const open = el("button", "model", row.model_id);
    open.type = "button";
    open.title = "Show details";
    open.addEventListener("click", () => showDetail(row));
    const tr = el(
      "tr",
      "row",
      el("td", "col-rank num", row.selection_rank === null ? "" : row.selection_rank),
      el("td", "model-cell", open),
      el("td", "result", resultCell(row)),
      pairCell(row.pair),
      el("td", "task", row.task),
      el("td", "cores num", dash(row.neuron_cores)),
      el("td", "wall num", seconds(row.wall_s)),
      memoryCell(row),
    );
    tr.dataset.index = String(row.index);
    return tr;
  }

  function matches(row) {
    if (state.view === "selection" && row.selection_rank === null) {
      return false;
    }
    if (state.search && !row.model_id.toLowerCase().includes(state.search)) {
      return false;
    }
    if (state.result === "FAIL*" && !row.result.startsWith("FAIL")) {
      return false;
    }
    if (state.result && state.result !== "FAIL*" && row.result !== state.result) {
      return false;
    }
    return (!state.pair || row.pair === state.pair) && (!state.task || row.task === state.task);
  }

  function groupHeader(task, group) {
    const counts = data.results
      .map((entry) => [entry.value, group.filter((row) => row.result === entry.value).length])
      .filter(([, count]) => count > 0)
      .map(([value, count]) => `${count} ${value}`)
      .join(" · ");
    const size = group.length === 1 ? "1 row" : `${group.length} rows`;
    const th = el("th", null, task, el("span", "group-counts", `${size}: ${counts}`));
    th.colSpan = 8;
    th.scope = "rowgroup";
    const tr = el("tr", "group", th);
    tr.dataset.task = task;
    return tr;
  }

  function render() {
    // the failures, architectures, performance and training views are sections of their own,
    // without filters
    const sections = ["failures", "coverage", "perf", "train", "dashboard"];
    const section = sections.includes(state.view);
    for (const id of sections) {
      byId(id).hidden = state.view !== id;
    }
    for (const node of explorer.querySelectorAll(".filters, #rows-table")) {
      node.hidden = section;
    }
    let shown = rows.filter(matches);
    if (state.view === "selection") {
      shown = shown.slice().sort((a, b) => a.selection_rank - b.selection_rank);
    }
    table.classList.toggle("selection", state.view === "selection");
    for (const body of table.querySelectorAll("tbody")) {
      body.remove();
    }
    if (state.view === "task") {
      for (const task of data.tasks) {
        const group = shown.filter((row) => row.task === task);
        if (group.length === 0) {
          continue;
        }
        const body = el("tbody", "task-group", groupHeader(task, group));
        body.append(...group.map(rowElement));
        table.append(body);
      }
    } else {
      const body = el("tbody");
      body.append(...shown.map(rowElement));
      table.append(body);
    }
    byId("shown").textContent = `${shown.length} of ${rows.length} rows`;
    byId("no-match").hidden = section || shown.length > 0;
    for (const button of document.querySelectorAll(".views button")) {
      button.setAttribute("aria-pressed", String(button.dataset.view === state.view));
    }
    for (const button of document.querySelectorAll("button.count")) {
      button.setAttribute("aria-pressed", String(button.dataset.result === state.result));
    }
  }

  function showDetail(row) {
    current = row;
    byId("detail-title").textContent = row.model_id;
    const values = {
      ...row,
      wall: seconds(row.wall_s),
      memory: memoryText(row),
      device_backend: [row.device, row.backend].filter(Boolean).join(" / "),
      reference_host: [row.reference_cpu, row.reference_isa].filter(Boolean).join(", ") || null,
      check: prettyJson(row.check),
      graphs: row.graph_count === null ? null : `${row.graph_count} / ${dash(row.graph_breaks)}`,
      cpu_ops_text: row.cpu_ops === null ? null : row.cpu_ops.join(", ") || "none",
      graph_break_reasons: (row.graph_break_reasons || []).join("\n") || null,
      repro_ops: reproOps(row),
    };
    for (const node of dialog.querySelectorAll("dd[data-field]")) {
      node.textContent = dash(values[node.dataset.field] ?? null);
    }
    for (const block of dialog.querySelectorAll("[data-block]")) {
      const value = values[block.dataset.block];
      block.hidden = value === null || value === "";
      block.querySelector("pre").textContent = value ?? "";
    }
    showHistory(row.model_id);
    byId("copy-status").textContent = "";
    byId("copy-repro-status").textContent = "";
    if (!dialog.open) {
      dialog.showModal();
    }
  }

  function showHistory(modelId) {
    // the model's result, compile time and speedup in each pair (the dashboard's figures)
    const entries = (data.history || {})[modelId] || [];
    const section = byId("detail-history");
    const body = section.querySelector("tbody");
    body.replaceChildren(
      ...entries.map((entry) => {
        let result = entry.result === null ? "—" : badge(entry.result);
        if (entry.result !== null && entry.unchecked) {
          result = el("span", null, badge(entry.result), " unchecked");
        }
        if (entry.result !== null && entry.compiled_nothing) {
          result = el("span", null, badge(entry.result), " compiled nothing");
        }
        return el(
          "tr",
          "history-row",
          el("td", "pair", entry.pair),
          el("td", "result", result),
          el("td", "num", entry.compile_s === null ? "—" : entry.compile_s.toFixed(2)),
          el("td", "num", entry.speedup === null ? "—" : `${entry.speedup.toFixed(2)}x`),
          el("td", "host", entry.reference_host ?? "—"),
        );
      }),
    );
    section.hidden = entries.length === 0;
  }

  function prettyJson(text) {
    if (text === null) {
      return null;
    }
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      return text;
    }
  }

  function reproOps(row) {
    if (row.repro_ops_after === null) {
      return null;
    }
    const before = row.repro_ops_before === null ? "" : ` (minified from ${row.repro_ops_before})`;
    return `${row.repro_ops_after} op${row.repro_ops_after === 1 ? "" : "s"}${before}`;
  }

  async function copyField(field, statusId) {
    const status = byId(statusId);
    try {
      await navigator.clipboard.writeText(current[field] ?? "");
      status.textContent = "Copied";
    } catch {
      const range = document.createRange();
      range.selectNodeContents(dialog.querySelector(`pre[data-field="${field}"]`));
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      status.textContent = "Selected: press Ctrl+C to copy";
    }
  }

  byId("search").addEventListener("input", (event) => {
    state.search = event.target.value.trim().toLowerCase();
    render();
  });
  for (const [id, key] of [["result-filter", "result"], ["pair-filter", "pair"], ["task-filter", "task"]]) {
    byId(id).addEventListener("change", (event) => {
      state[key] = event.target.value;
      render();
    });
  }
  for (const button of document.querySelectorAll(".views button")) {
    button.addEventListener("click", () => {
      state.view = button.dataset.view;
      render();
    });
  }
  for (const button of document.querySelectorAll("button.count")) {
    button.addEventListener("click", () => {
      state.result = state.result === button.dataset.result ? "" : button.dataset.result;
      byId("result-filter").value = state.result;
      render();
    });
  }
  byId("detail-close").addEventListener("click", () => dialog.close());
  dialog.addEventListener("click", (event) => {
    const box = dialog.getBoundingClientRect();
    const inside = event.clientX >= box.left && event.clientX <= box.right
      && event.clientY >= box.top && event.clientY <= box.bottom;
    if (event.target === dialog && !inside) {
      dialog.close(); // a click on the backdrop
    }
  });
  byId("copy-run-py").addEventListener("click", () => copyField("run_py", "copy-status"));
  byId("copy-repro-py").addEventListener("click", () => copyField("repro_py", "copy-repro-status"));
  for (const button of document.querySelectorAll("#failures button[data-index], #dashboard button[data-index]")) {
    button.addEventListener("click", () => showDetail(rows[Number(button.dataset.index)]));
  }
  render();
})();
