#!/usr/bin/env python3
"""Opens perfbench's pages (report.html, compare.html) in headless Chromium and checks them.

For each page: a screenshot (PAGE.png beside --shots), and through the browser that the page
loads with no console errors, makes no network request (every host is unresolvable and the
page's resource timing must be empty), has every plot present (an <svg> with drawing inside each
figure), and that clicking a sortable table's header changes the row order.

The checks run in a copy of the page with a small probe script first in <head>: it records
console errors and uncaught exceptions, then after load clicks the headers and writes its
findings as JSON into the DOM, which `chromium --dump-dom` prints. (No CDP client is needed:
Python's websockets is not installed here.)

Usage: browser-check.py --shots DIR PAGE.html...   exit 0 when every page passes, 1 otherwise.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROBE = r"""<script>
(function () {
  var found = { errors: [] };
  window.addEventListener("error", function (e) { found.errors.push("uncaught: " + e.message); }, true);
  var error = console.error;
  console.error = function () { found.errors.push("console.error: " + Array.prototype.join.call(arguments, " ")); error.apply(console, arguments); };
  window.addEventListener("load", function () {
    found.requests = performance.getEntriesByType("resource").map(function (r) { return r.name; });
    found.figures = document.querySelectorAll("figure.plot").length;
    found.plots = Array.prototype.filter.call(document.querySelectorAll("figure.plot"), function (f) {
      var svg = f.querySelector("svg");
      return svg && svg.querySelectorAll("rect, circle, polyline, path, line").length > 10;
    }).length;
    found.hover = document.querySelectorAll("figure.plot svg g.hover title").length;
    found.sorts = [];
    document.querySelectorAll("table.sortable").forEach(function (table) {
      var order = function () { return Array.prototype.map.call(table.tBodies[0].rows, function (r) { return r.textContent; }).join("\n"); };
      if (table.tBodies[0].rows.length < 2) { return; }
      // Each header once, then again (reversed): some click must change the order.
      var before = order(), changed = false;
      table.querySelectorAll("th").forEach(function (th) {
        th.click(); if (order() !== before) { changed = true; }
        th.click(); if (order() !== before) { changed = true; }
      });
      found.sorts.push({ table: table.id, rows: table.tBodies[0].rows.length, changed: changed });
    });
    var out = document.createElement("pre");
    out.id = "browser-check";
    out.textContent = JSON.stringify(found);
    document.body.appendChild(out);
  });
})();
</script>"""

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Nothing resolves: a page that tried the network would fail to load it, and show it.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--virtual-time-budget=5000",
]


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("browser-check: no chromium (scripts/browser-check.sh installs Debian's)")


def run(browser, args, profile):
    cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def check(browser, page, shots):
    problems = []
    name = os.path.basename(os.path.dirname(os.path.abspath(page))) + "-" + os.path.basename(page)
    shot = os.path.join(shots, name.replace(".html", ".png"))
    with tempfile.TemporaryDirectory() as tmp:
        run(browser, ["--window-size=1200,2400", f"--screenshot={shot}", "file://" + os.path.abspath(page)], tmp + "/p1")
        if not os.path.isfile(shot):
            problems.append("no screenshot")
        html = open(page, encoding="utf-8").read()
        probed = os.path.join(tmp, "probed.html")
        with open(probed, "w", encoding="utf-8") as f:
            f.write(html.replace("<head>", "<head>\n" + PROBE, 1))
        dom = run(browser, ["--dump-dom", "file://" + probed], tmp + "/p2")
    m = re.search(r'<pre id="browser-check">(.*?)</pre>', dom.stdout, re.S)
    if not m:
        return shot, ["the probe wrote nothing: " + dom.stderr[-500:]], {}
    found = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    if found["errors"]:
        problems.append(f"console errors: {found['errors']}")
    if found["requests"]:
        problems.append(f"network requests: {found['requests']}")
    expected = html.count('<figure class="plot"')
    if expected == 0 or found["plots"] != expected:
        problems.append(f"plots present {found['plots']} of {expected}")
    if found["hover"] < expected:
        problems.append(f"hover values: {found['hover']}")
    sortable = [s for s in found["sorts"]]
    if not sortable or not all(s["changed"] for s in sortable):
        problems.append(f"sorting did not change the order: {sortable}")
    return shot, problems, found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shots", required=True)
    parser.add_argument("pages", nargs="+")
    args = parser.parse_args()
    os.makedirs(args.shots, exist_ok=True)
    browser = chromium()
    failed = False
    for page in args.pages:
        shot, problems, found = check(browser, page, args.shots)
        summary = f"{len(found.get('requests', []))} requests, {found.get('plots')} plots, {found.get('hover')} hover values, sorted tables {[s['table'] for s in found.get('sorts', [])]}"
        if problems:
            failed = True
            print(f"FAIL {page}: {'; '.join(problems)}")
        else:
            print(f"ok   {page}: {summary}; screenshot {shot}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
