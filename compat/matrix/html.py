"""The matrix as one self-contained HTML page: no network needed to view it.

Rows are touchpoints grouped by probe, columns are builds, each cell is coloured by status so the reader sees
where the red starts; the first bad build of a row is outlined. Clicking a cell opens its finding (message,
evidence, fix, where in vLLM). The data sits in the page as JSON; a few lines of script draw the details.
"""

from __future__ import annotations

import html
import json

from compat.matrix.result import BLANK, LEGEND, Matrix

_STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px;margin:0 0 4px}
.meta{color:#555;margin-bottom:10px}
.legend span{display:inline-block;padding:1px 6px;margin-right:6px;border-radius:3px}
table{border-collapse:collapse}
th,td{border:1px solid #ddd;padding:0}
th.build{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;padding:4px 2px;white-space:nowrap}
th.build.err{color:#7b1fa2}
td.name{padding:2px 6px;white-space:nowrap;max-width:560px;overflow:hidden;text-overflow:ellipsis}
td.probe{background:#f4f4f4;font-weight:bold;padding:4px 6px}
td.c{width:16px;height:18px;cursor:pointer}
td.c.first{outline:2px solid #000;outline-offset:-2px}
.ok{background:#c8e6c9}.broken{background:#e53935}.changed{background:#fb8c00}.unknown{background:#bdbdbd}
.error{background:#8e24aa}.none{background:#fff;border:1px solid #ddd}
.legend span.first{outline:2px solid #000;outline-offset:-2px}
#detail{position:fixed;right:16px;top:16px;width:38%;max-height:90vh;overflow:auto;background:#fff;
border:1px solid #999;box-shadow:0 2px 8px #0003;padding:10px;display:none}
#detail pre{white-space:pre-wrap;background:#f7f7f7;padding:6px}
td.first-bad{padding:2px 6px;white-space:nowrap}
"""

_SCRIPT = """
const data = JSON.parse(document.getElementById('matrix-data').textContent);
const panel = document.getElementById('detail');
function show(r, b) {
  const row = data.rows[r], label = data.builds[b].label, cell = row.cells[label];
  if (!cell) { panel.style.display = 'none'; return; }
  const esc = s => String(s ?? '').replace(/[&<>]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;'}[c]));
  let text = '<button onclick="this.parentNode.style.display=\\'none\\'">close</button>';
  text += '<h2>' + esc(cell.status) + ' in vLLM ' + esc(label) + '</h2>';
  text += '<p><b>' + esc(row.probe) + '</b> <code>' + esc(row.touchpoint) + '</code><br>at '
    + esc(row.location) + '</p>';
  if (row.code) text += '<pre>' + esc(row.code) + '</pre>';
  text += '<p>' + esc(cell.message) + '</p>';
  if (cell.fix) text += '<p><b>fix:</b> ' + esc(cell.fix) + '</p>';
  if (cell.vllm_location) text += '<p><b>in vLLM:</b> ' + esc(cell.vllm_location) + '</p>';
  const ev = cell.evidence || {};
  const shown = Object.keys(ev).filter(
    k => ev[k] !== null && ev[k] !== '' && !(Array.isArray(ev[k]) && !ev[k].length));
  const line = k => k + ': ' + (typeof ev[k] === 'string' ? ev[k] : JSON.stringify(ev[k]));
  if (shown.length) text += '<pre>' + esc(shown.map(line).join('\\n')) + '</pre>';
  text += '<p>' + esc(row.what_happened) + '</p>';
  panel.innerHTML = text; panel.style.display = 'block';
}
document.getElementById('grid').addEventListener('click', e => {
  const td = e.target.closest('td.c'); if (td) show(+td.dataset.r, +td.dataset.b);
});
const toggle = document.getElementById('all');
function filter() {
  document.querySelectorAll('tr.row').forEach(tr => {
    tr.style.display = (toggle.checked || tr.dataset.bad === '1') ? '' : 'none'; });
}
toggle.addEventListener('change', filter); filter();
document.body.dataset.ready = '1';
"""


def page(matrix: Matrix) -> str:
    data = matrix.as_json()
    builds = data["builds"]
    e = html.escape
    parts = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
             f"<title>vLLM compatibility: {e(matrix.consumer)} {e(matrix.consumer_version or '')}</title>",
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>vLLM compatibility matrix: {e(matrix.consumer)} {e(matrix.consumer_version or '')}</h1>",
             f"<div class=meta>{len(matrix.rows)} touchpoints against {len(builds)} builds "
             f"({e(builds[0]['label']) if builds else ''} to {e(builds[-1]['label']) if builds else ''}); "
             f"{len(matrix.interesting())} are not ok in every build. Click a cell for its finding.</div>",
             "<div class=legend>" + "".join(f"<span class={s}>{e(LEGEND[s])}</span>" for s in LEGEND)
             + f"<span class=none title=\"{e(BLANK, quote=True)}\">blank: no finding</span>"
             + "<span class='first'>outlined: first bad build (the first of the range: broken at or before it)</span>",
             "<label><input type=checkbox id=all> show touchpoints that are ok everywhere</label></div>",
             "<table id=grid><thead><tr><th>touchpoint</th>"]
    for build in builds:
        title = e(build["error"] or build["origin"] or build["spec"], quote=True)
        parts.append(f"<th class='build{' err' if build['error'] else ''}' title=\"{title}\">{e(build['label'])}</th>")
    parts.append("<th>first bad (last good)</th></tr></thead><tbody>")
    bad_rows = [any(c["status"] != "ok" for c in row["cells"].values()) for row in data["rows"]]
    bad_probes = {row["probe"] for row, bad in zip(data["rows"], bad_rows) if bad}
    probe = None
    for r, (row, bad) in enumerate(zip(data["rows"], bad_rows)):
        if row["probe"] != probe:
            probe = row["probe"]
            parts.append(f"<tr class=row data-bad={int(probe in bad_probes)}><td class=probe "
                         f"colspan={len(builds) + 2}>{e(probe)}</td></tr>")
        label = row["touchpoint"].rpartition("@")[2]  # a model check: the architecture and what is checked
        tip = f"{row['touchpoint']}\n{row['code'] or ''}"
        parts.append(f"<tr class=row data-bad={int(bad)}><td class=name title=\"{e(tip, quote=True)}\">"
                     f"{e(label)} <small>{e(row['location'] or '')}</small></td>")
        for b, build in enumerate(builds):
            cell = row["cells"].get(build["label"])
            status = cell["status"] if cell else "none"
            first = " first" if build["label"] == row["first_bad"] else ""
            tip = e(f"{build['label']}: {status}", quote=True)
            parts.append(f"<td class='c {status}{first}' data-r={r} data-b={b} title=\"{tip}\"></td>")
        parts.append(f"<td class=first-bad>{e(row['what_happened'])}</td></tr>")
    parts.append("</tbody></table><div id=detail></div>")
    payload = json.dumps(data).replace("</", "<\\/")
    parts.append(f"<script type=application/json id=matrix-data>{payload}</script>")
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "".join(parts) + "\n"
