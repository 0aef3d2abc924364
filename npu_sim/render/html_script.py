"""The small inline script and style sheet of the HTML report (no network requests, no external files).

The script makes every ``table.sortable`` sortable (a click on a header cell sorts by that column, numerically
when the cells hold numbers, a second click reverses) and filterable (an ``input.filter`` whose ``data-table``
names the table's id hides the rows whose text, tooltips included, does not contain what is typed), and lets the
graph view switch its colouring between accumulated and isolated error (``select#graph-color``); a link to a row of
a collapsed table (``<details>``) opens it.
``table_filter`` writes the filter box of a table.
"""
from __future__ import annotations

import html

CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px;overflow-wrap:anywhere}h2{font-size:17px;margin-top:28px}p{overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
td{white-space:nowrap}
th{background:#f0f0f0}td.l,th.l{text-align:left}tr.bad td{background:#fde2e2}tr.collapse td{background:#f9c0c0}
td.wrap{white-space:normal;max-width:360px;overflow-wrap:anywhere;text-align:left}
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#e2e8f0}
th.asc::after{content:" \\25B2";font-size:9px}th.desc::after{content:" \\25BC";font-size:9px}
tr:target td{background:#fff3b0 !important;outline:2px solid #e67e22}
.scroll{max-width:100%;overflow-x:auto}.graphbox{display:inline-block;max-width:100%;max-height:820px;overflow:auto;border:1px solid #ddd}
.note{color:#555;font-size:13px}svg{background:#fff;border:1px solid #ddd;margin:4px}.graphbox svg{border:0;margin:0}
.hists{display:flex;flex-wrap:wrap}.legend{font-size:12px}pre{white-space:pre-wrap;overflow-wrap:anywhere}
input.filter{margin:4px 0;padding:2px 6px;font-size:12px;width:280px}
details{margin:6px 0}summary{cursor:pointer;color:#2c3e50;font-size:13px}
.verdict{border:2px solid #2c3e50;border-radius:6px;padding:4px 16px;background:#f8fafc;max-width:1100px}
.verdict .ok{color:#1e7b34}.verdict .no{color:#b03a2e}.verdict li{margin:4px 0}
.gnode rect.box{stroke:#555;stroke-width:.8}.gnode:hover rect.box{stroke:#000;stroke-width:2}
"""

SCRIPT = r"""<script>
(function () {
  function cellValue(td) {
    var t = (td.getAttribute('data-v') || td.textContent).trim().replace(/,/g, '').replace(/%$/, '');
    if (t === 'inf') return Infinity;
    if (t === '-inf') return -Infinity;
    var v = parseFloat(t);
    return (isNaN(v) || !/^[-+]?[0-9.]/.test(t)) ? null : v;
  }
  function sortBy(table, col, th) {
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    var desc = th.classList.contains('asc');
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) { c.classList.remove('asc', 'desc'); });
    th.classList.add(desc ? 'desc' : 'asc');
    var keyed = rows.map(function (r, i) {
      var td = r.cells[col];
      return {r: r, i: i, v: td ? cellValue(td) : null, s: td ? td.textContent.trim().toLowerCase() : ''};
    });
    var numeric = keyed.some(function (k) { return k.v !== null; });
    keyed.sort(function (a, b) {
      var d;
      if (numeric) {
        if (a.v === null || b.v === null) return (a.v === null) - (b.v === null) || a.i - b.i;
        d = a.v < b.v ? -1 : (a.v > b.v ? 1 : 0);
      } else {
        d = a.s < b.s ? -1 : (a.s > b.s ? 1 : 0);
      }
      return (desc ? -d : d) || a.i - b.i;
    });
    keyed.forEach(function (k) { body.appendChild(k.r); });
  }
  function rowText(r) {
    var t = r.textContent;
    Array.prototype.forEach.call(r.querySelectorAll('[title]'), function (e) { t += ' ' + e.getAttribute('title'); });
    return t.toLowerCase();
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.title = 'sort by ' + th.textContent.trim();
      th.addEventListener('click', function () { sortBy(table, col, th); });
    });
  });
  document.querySelectorAll('input.filter').forEach(function (box) {
    var table = document.getElementById(box.getAttribute('data-table'));
    box.addEventListener('input', function () {
      var q = box.value.trim().toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        r.style.display = (!q || rowText(r).indexOf(q) >= 0) ? '' : 'none';
      });
    });
  });
  function reveal() {  // a link into a collapsed table (the graph's boxes, the tables' links) opens it first
    var t = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    for (var d = t && t.parentElement; d; d = d.parentElement) if (d.tagName === 'DETAILS') d.open = true;
  }
  window.addEventListener('hashchange', reveal);
  reveal();
  var sel = document.getElementById('graph-color');
  if (sel) sel.addEventListener('change', function () {
    document.querySelectorAll('.gnode rect.box').forEach(function (r) {
      r.setAttribute('fill', r.getAttribute('data-' + sel.value));
    });
  });
})();
</script>"""


def table_filter(table_id: str, what: str) -> str:
    """The filter box of table ``table_id`` (the script hides the rows that do not match)."""
    return (f"<input class='filter' type='search' data-table='{html.escape(table_id)}' "
            f"placeholder='filter {html.escape(what)}…' aria-label='filter {html.escape(what)}'>")
