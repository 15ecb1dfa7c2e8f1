// Tidelog console: live tail over server-sent events. Every record field goes in through textContent,
// never as markup. The server sends at most 20 records a tick and says how many it skipped; the table
// keeps the newest MAX_ROWS.
(function () {
  "use strict";
  const MAX_ROWS = 100;

  function cell(row, text, cls, label) {
    const td = document.createElement("td");
    td.dataset.label = label;
    td.textContent = text;
    if (cls) td.className = cls;
    row.appendChild(td);
    return td;
  }

  function startTail(button) {
    const stop = document.getElementById("tail-stop");
    const status = document.getElementById("tail-status");
    const body = document.querySelector("#tail tbody");
    let received = 0, skipped = 0;
    const started = Date.now();
    const scope = button.dataset.scope || "the topic";
    const source = new EventSource(button.dataset.url);
    button.disabled = true;
    stop.disabled = false;
    status.textContent = "Connecting…";
    source.addEventListener("ready", function () {
      if (!received) status.textContent = "Following " + scope + ": connected, waiting for new records.";
    });
    source.onmessage = function (ev) {
      const tick = JSON.parse(ev.data);
      received += tick.seen;
      skipped += tick.skipped;
      const frag = document.createDocumentFragment();
      for (const r of tick.records) {
        const tr = document.createElement("tr");
        cell(tr, String(r.partition), "", "Partition");
        const off = cell(tr, "", "", "Offset");
        const a = document.createElement("a");
        a.href = r.link;
        a.textContent = String(r.offset);
        off.appendChild(a);
        cell(tr, new Date(r.timestamp).toISOString(), "nowrap", "Timestamp");
        cell(tr, r.key_format === "null" ? "null" : r.key, "v fmt-" + r.key_format, "Key");
        cell(tr, (r.value_format === "null" ? "null" : r.value) + (r.truncated ? " …" : ""), "v fmt-" + r.value_format,
          "Value");
        frag.prepend(tr);
      }
      body.prepend(frag);
      while (body.rows.length > MAX_ROWS) body.deleteRow(body.rows.length - 1);
      const secs = Math.max((Date.now() - started) / 1000, 0.001);
      status.textContent = "Following " + scope + ": " + received + " records received (" + Math.round(received / secs) + "/s)" +
        (skipped ? "; " + skipped + " not drawn (sampled: at most 20 per quarter second are drawn)" : "") + ".";
    };
    source.addEventListener("tail-error", function (ev) {
      status.textContent = "Stopped: " + JSON.parse(ev.data).error;
      source.close();
      button.disabled = false;
      stop.disabled = true;
    });
    source.onerror = function () {
      if (source.readyState === EventSource.CLOSED) status.textContent = "Disconnected.";
    };
    stop.onclick = function () {
      source.close();
      button.disabled = false;
      stop.disabled = true;
      status.textContent = "Stopped after " + received + " records.";
    };
  }

  document.addEventListener("DOMContentLoaded", function () {
    const button = document.getElementById("tail-start");
    if (button) button.addEventListener("click", function () { startTail(button); });
  });
})();
