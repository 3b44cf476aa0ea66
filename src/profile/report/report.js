// SPDX-License-Identifier: Apache-2.0
// The memory report viewer. Reads the snapshot JSON embedded in the page (schema: docs/profiling.md) and
// renders, per device: the summary table, the memory timeline stacked by kind with the peak marked, the peak
// breakdown (sortable), fragmentation over time, the allocator's segment map at the peak and the per-op
// high-water marks. No network, no libraries: the page must open from a file on an offline machine.
// When done it sets window.tpReport = {rendered: true, devices: N} (the headless-browser test waits for it).
(function () {
  "use strict";
  const KINDS = ["parameter", "weight_gradient", "optimizer_state", "step_arena", "activation", "temporary", "staging",
                 "fetched", "unknown"];
  const SVG = "http://www.w3.org/2000/svg";

  // Mirrors tp::format_bytes: "256 B", "1.50 MiB".
  function formatBytes(bytes) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    if (bytes < 1024) return bytes + " B";
    let value = bytes, unit = 0;
    while (value >= 1024 && unit + 1 < units.length) { value /= 1024; unit += 1; }
    return value.toFixed(2) + " " + units[unit];
  }

  function element(tag, attributes, text) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function svgElement(tag, attributes, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attributes || {})) node.setAttribute(key, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function panel(parent, title) {
    const box = element("div", { class: "panel" });
    box.appendChild(element("h3", {}, title));
    parent.appendChild(box);
    return box;
  }

  function shapeText(tag) {
    return tag.dtype ? tag.dtype + "[" + tag.shape.join(",") + "]" : "";
  }

  // A table whose numeric columns carry data-value (bytes as integers) next to the formatted text.
  function table(id, headers, rows, sortable) {
    const node = element("table", { id: id });
    const head = element("tr");
    headers.forEach((header, column) => {
      const cell = element("th", sortable ? { class: "sortable", "data-column": column } : {}, header);
      head.appendChild(cell);
    });
    node.appendChild(head);
    for (const row of rows) {
      const line = element("tr");
      for (const cell of row) {
        const attributes = {};
        if (cell.field) attributes["data-field"] = cell.field;
        if (cell.value !== undefined) attributes["data-value"] = String(cell.value);
        line.appendChild(element("td", attributes, cell.text));
      }
      node.appendChild(line);
    }
    if (sortable) makeSortable(node);
    return node;
  }

  function makeSortable(node) {
    node.querySelectorAll("th.sortable").forEach((header) => {
      header.addEventListener("click", () => {
        const column = Number(header.dataset.column);
        const descending = !header.classList.contains("sorted-desc");
        node.querySelectorAll("th").forEach((other) => other.classList.remove("sorted-asc", "sorted-desc"));
        header.classList.add(descending ? "sorted-desc" : "sorted-asc");
        const rows = Array.from(node.querySelectorAll("tr")).slice(1);
        const key = (row) => {
          const cell = row.children[column];
          return cell.dataset.value !== undefined ? Number(cell.dataset.value) : cell.textContent;
        };
        rows.sort((a, b) => {
          const x = key(a), y = key(b);
          const order = x < y ? -1 : x > y ? 1 : 0;
          return descending ? -order : order;
        });
        rows.forEach((row) => node.appendChild(row));
      });
    });
  }

  function bytesCell(value, field) { return { text: formatBytes(value), value: value, field: field }; }
  function textCell(text, field) { return { text: String(text), field: field }; }

  function summary(device, index) {
    const s = device.stats, dash = textCell("-");
    const live = Math.max(0, s.num_allocs - s.num_frees);
    const rows = [
      [textCell("in use"), bytesCell(s.bytes_in_use, "bytes_in_use"), bytesCell(s.peak_bytes_in_use, "peak_bytes_in_use"),
        device.recording ? bytesCell(device.total_allocated_bytes, "total_allocated_bytes") : dash,
        device.recording ? bytesCell(device.total_freed_bytes, "total_freed_bytes") : dash],
      [textCell("reserved"), bytesCell(s.bytes_reserved, "bytes_reserved"),
        bytesCell(s.peak_bytes_reserved, "peak_bytes_reserved"), dash, dash],
      [textCell("requested"), bytesCell(s.bytes_requested, "bytes_requested"),
        bytesCell(s.peak_bytes_requested, "peak_bytes_requested"), dash, dash],
      [textCell("fragmentation"), { text: (100 * s.fragmentation).toFixed(1) + "%", value: s.fragmentation,
        field: "fragmentation" }, dash, dash, dash],
      [textCell("allocs"), { text: String(live), value: live, field: "live_allocs" }, dash,
        { text: String(s.num_allocs), value: s.num_allocs, field: "num_allocs" },
        { text: String(s.num_frees), value: s.num_frees, field: "num_frees" }],
      [textCell("OOMs"), dash, dash, { text: String(s.num_ooms), value: s.num_ooms, field: "num_ooms" }, dash],
      [textCell("retries"), dash, dash, { text: String(s.num_retries), value: s.num_retries, field: "num_retries" },
        dash],
    ];
    if (device.planned_peak_bytes !== null) {
      rows.push([textCell("planned peak"), dash, bytesCell(device.planned_peak_bytes, "planned_peak_bytes"), dash,
        dash]);
    }
    return table("summary-" + index, ["", "current", "peak", "total allocated", "total freed"], rows, false);
  }

  // Events as objects, from the column-major rows.
  function events(device) {
    const columns = device.events.columns;
    return device.events.rows.map((row) => {
      const event = {};
      columns.forEach((name, column) => { event[name] = row[column]; });
      return event;
    });
  }

  function legend(parent) {
    const box = element("div", { class: "legend" });
    for (const kind of KINDS) {
      const item = element("span", { style: "--swatch: var(--" + kind + ")" }, kind);
      box.appendChild(item);
    }
    parent.appendChild(box);
  }

  // Stacked areas of live allocated bytes per kind over the event index (even spacing keeps bursts legible).
  function timeline(device, index, list) {
    const width = 900, height = 240, left = 70, bottom = 20;
    const svg = svgElement("svg", { id: "timeline-" + index, width: width, height: height,
      viewBox: "0 0 " + width + " " + height, "data-events": list.length });
    if (list.length === 0) {
      svg.appendChild(svgElement("text", { x: 10, y: 20 }, "no recorded events"));
      return svg;
    }
    const current = {};
    for (const kind of KINDS) current[kind] = device.events.baseline_by_kind[kind] || 0;
    const series = [];
    let top = 1;
    for (const event of list) {
      const kind = device.tags[event.tag].kind;
      if (event.action === "allocate") current[kind] += event.allocated_bytes;
      if (event.action === "free") current[kind] -= event.allocated_bytes;
      series.push(Object.assign({}, current));
      top = Math.max(top, event.in_use_bytes, device.peak.in_use_bytes);
    }
    const x = (i) => left + (list.length === 1 ? 0 : (i * (width - left - 10)) / (list.length - 1));
    const y = (bytes) => height - bottom - (bytes * (height - bottom - 20)) / top;
    const below = series.map(() => 0);
    for (const kind of KINDS) {
      if (!series.some((point) => point[kind] > 0)) continue;
      const upper = series.map((point, i) => below[i] + point[kind]);
      let path = "M" + x(0) + "," + y(below[0]);
      upper.forEach((value, i) => { path += " L" + x(i) + "," + y(value); });
      for (let i = series.length - 1; i >= 0; --i) path += " L" + x(i) + "," + y(below[i]);
      svg.appendChild(svgElement("path", { d: path + " Z", fill: "var(--" + kind + ")", "data-kind": kind }));
      upper.forEach((value, i) => { below[i] = value; });
    }
    svg.appendChild(svgElement("text", { x: 4, y: 14 }, formatBytes(top)));
    svg.appendChild(svgElement("text", { x: 4, y: height - bottom }, "0 B"));
    // The peak: the retained event whose in-use bytes reached the recorded peak, else the largest retained.
    let peakAt = list.findIndex((event) => event.sequence === device.peak.sequence);
    if (peakAt < 0) peakAt = list.reduce((best, event, i) => (event.in_use_bytes > list[best].in_use_bytes ? i : best), 0);
    const marker = svgElement("g", { id: "peak-marker-" + index, "data-bytes": device.peak.in_use_bytes });
    marker.appendChild(svgElement("line", { class: "peak-line", x1: x(peakAt), x2: x(peakAt), y1: 18, y2: height - bottom }));
    const labelX = Math.min(x(peakAt) + 4, width - 150);
    marker.appendChild(svgElement("text", { class: "peak-label", x: labelX, y: 30 },
      "peak " + formatBytes(device.peak.in_use_bytes)));
    svg.appendChild(marker);
    return svg;
  }

  function fragmentation(index, list) {
    const width = 900, height = 120, left = 70, bottom = 16;
    const svg = svgElement("svg", { id: "fragmentation-" + index, width: width, height: height,
      viewBox: "0 0 " + width + " " + height });
    if (list.length === 0) return svg;
    const x = (i) => left + (list.length === 1 ? 0 : (i * (width - left - 10)) / (list.length - 1));
    const y = (ratio) => height - bottom - ratio * (height - bottom - 10);
    let path = "";
    list.forEach((event, i) => {
      const free = Math.max(0, event.reserved_bytes - event.in_use_bytes);
      const ratio = free === 0 ? 0 : 1 - Math.min(event.largest_free_block, free) / free;
      path += (i === 0 ? "M" : " L") + x(i) + "," + y(ratio);
    });
    svg.appendChild(svgElement("path", { d: path, fill: "none", stroke: "#e15759", "stroke-width": 1.5 }));
    svg.appendChild(svgElement("text", { x: 4, y: 14 }, "100%"));
    svg.appendChild(svgElement("text", { x: 4, y: height - bottom }, "0%"));
    return svg;
  }

  function breakdown(device, index) {
    const rows = device.peak.tensors.map((tensor) => {
      const tag = device.tags[tensor.tag];
      return [textCell(tag.name || "<untagged>", "name"), textCell(tag.kind, "kind"), textCell(tag.op, "op"),
        textCell(shapeText(tag), "shape"), bytesCell(tensor.requested_bytes, "requested_bytes"),
        bytesCell(tensor.allocated_bytes, "allocated_bytes")];
    });
    return table("breakdown-" + index, ["tensor", "kind", "op", "shape", "requested", "allocated"], rows, true);
  }

  function groups(rows, key, id) {
    return table(id, [key, "tensors", "requested", "allocated"], rows.map((row) => [textCell(row[key], key),
      { text: String(row.tensors), value: row.tensors }, bytesCell(row.requested_bytes, "requested_bytes"),
      bytesCell(row.allocated_bytes, "allocated_bytes")]), true);
  }

  function segmentMap(device, index) {
    const box = element("div", { class: "segment-map", id: "segments-" + index });
    const segments = device.peak.segments.length > 0 ? device.peak.segments : device.segments;
    for (const segment of segments) {
      box.appendChild(element("div", { class: "caption" }, segment.address + ": " + formatBytes(segment.size)));
      const bar = element("div", { class: "segment", "data-size": segment.size });
      for (const block of segment.blocks) {
        const kind = block.state === "free" ? "free" : block.tag !== null ? device.tags[block.tag].kind : "unknown";
        const name = block.tag !== null ? device.tags[block.tag].name : block.state;
        const share = segment.size > 0 ? (100 * block.size) / segment.size : 0;
        bar.appendChild(element("div", { class: "block", "data-state": block.state,
          style: "width:" + share + "%;background:var(--" + kind + ")",
          title: name + " " + formatBytes(block.size) }));
      }
      box.appendChild(bar);
    }
    if (segments.length === 0) box.appendChild(element("p", { class: "note" }, "no segments"));
    return box;
  }

  function highWater(device, index) {
    return table("high-water-" + index, ["op", "high water", "current", "allocations"],
      device.op_high_water.map((op) => [textCell(op.op, "op"), bytesCell(op.high_water_bytes, "high_water_bytes"),
        bytesCell(op.current_bytes, "current_bytes"), { text: String(op.allocations), value: op.allocations }]), true);
  }

  function render() {
    const snapshot = JSON.parse(document.getElementById("tp-snapshot").textContent);
    document.getElementById("report-meta").textContent = "snapshot schema " + snapshot.schema + " v" +
      snapshot.version + ", " + snapshot.reason + ", " + snapshot.devices.length + " device(s)";
    const root = document.getElementById("report");
    snapshot.devices.forEach((device, index) => {
      const section = element("section", { class: "device", id: "device-" + index, "data-device": device.device });
      const shared = device.shared ? "shared memory of " + device.shared_of + ", " : "";
      section.appendChild(element("h2", {}, device.device + " (" + shared + device.allocator + ", " + device.policy +
        ", limit " + formatBytes(device.limit_bytes) + ")"));
      panel(section, "Summary").appendChild(summary(device, index));
      const list = events(device);
      const time = panel(section, "Memory timeline by kind (allocated bytes per event" +
        (device.events.dropped > 0 ? ", " + device.events.dropped + " older events dropped" : "") + ")");
      legend(time);
      time.appendChild(timeline(device, index, list));
      const peak = panel(section, "At the peak: " + formatBytes(device.peak.in_use_bytes) + " in use");
      peak.appendChild(groups(device.peak.by_kind, "kind", "peak-by-kind-" + index));
      peak.appendChild(element("p", { class: "note" }, "By op:"));
      peak.appendChild(groups(device.peak.by_op, "op", "peak-by-op-" + index));
      peak.appendChild(element("p", { class: "note" }, "Live tensors (click a column to sort):"));
      peak.appendChild(breakdown(device, index));
      panel(section, "Fragmentation over time").appendChild(fragmentation(index, list));
      panel(section, "Segment map at the peak").appendChild(segmentMap(device, index));
      panel(section, "Per-op high-water marks").appendChild(highWater(device, index));
      root.appendChild(section);
    });
    // "#sort=<table id>,<column>" sorts a table on load (descending), so a sorted view can be linked.
    const sort = /sort=([\w-]+),(\d+)/.exec(window.location.hash);
    if (sort) {
      const header = document.querySelector("#" + sort[1] + " th[data-column='" + sort[2] + "']");
      if (header) header.click();
    }
    window.tpReport = { rendered: true, devices: snapshot.devices.length };
    document.body.setAttribute("data-rendered", "true");
  }

  try {
    render();
  } catch (error) {
    document.body.setAttribute("data-render-error", String(error));
    document.getElementById("report").textContent = "The report could not be rendered: " + error;
  }
})();
