"""#37 item 2, as a reader sees it: headless Chromium renders a failed run's report.html and the pixels show the
nodes a failure or the diagnosis names outlined red, the node nothing names green, and text in every cell of
the Failures table. test_report_failures.py holds the same facts at the DOM level, without a browser.

Chromium comes from Debian's package (``apt-get install -y chromium``); without it this test skips. The boxes'
and cells' places come from the same page with a measuring script appended after its content (so the layout
above it is the one screenshotted), read back with ``--dump-dom``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from k3lab.reports import failures, runreports
from tests.unit.reports.test_report_failures import make_failed_run

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
# CI installs it (.ci/run), so there a missing browser fails the test instead of skipping it
pytestmark = pytest.mark.skipif(BROWSER is None and not os.environ.get("CI"),
                                reason="headless Chromium not installed (apt-get install -y chromium)")
SIZE = (1600, 3200)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
         f"--window-size={SIZE[0]},{SIZE[1]}"]
MEASURE = """<pre id="k3lab-rects"></pre><script>
const r = e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; };
document.getElementById("k3lab-rects").textContent = JSON.stringify({
  nodes: Object.fromEntries([...document.querySelectorAll("g.node")].map(g => [g.dataset.node, r(g.querySelector("rect"))])),
  cells: [...document.querySelectorAll("table.failures td[class^=f-]")].map(td => [td.className, r(td)])});
</script>"""


def _browser(*args: str) -> str:
    res = subprocess.run([str(BROWSER), *FLAGS, *args], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


def _red(px: tuple[int, ...]) -> bool:
    """rect.box.fail's #cf222e, or its anti-aliased edge: red well above green and blue."""
    r, g, b = px[:3]
    return r - max(g, b) > 60


def _green(px: tuple[int, ...]) -> bool:
    """rect.box.pass's #1a7f37, or its anti-aliased edge."""
    r, g, b = px[:3]
    return g - max(r, b) > 30


def _outline(img, box: list[float]) -> tuple[int, int]:
    """(red, green) pixels on the box's left and right edges, where its outline is drawn."""
    left, top, right, bottom = (round(v) for v in box)
    edge = [img.getpixel((x, y))[:3] for y in range(top + 8, bottom - 8) for x in (*range(left - 1, left + 3),
                                                                                    *range(right - 3, right + 1))]
    return sum(map(_red, edge)), sum(map(_green, edge))


def _inked(img, box: list[float]) -> int:
    """Pixels of text in a cell: darker than the table's borders and background."""
    left, top, right, bottom = (round(v) for v in box)
    return sum(sum(img.getpixel((x, y))[:3]) < 300 for y in range(top + 3, bottom - 3) for x in range(left + 3, right - 3))


def test_a_screenshot_shows_the_named_nodes_marked_and_every_failure_cell_filled(tmp_path):
    from PIL import Image

    run = make_failed_run(tmp_path)
    runreports.rebuild(run)
    page = run / "report.html"
    measured = run / "measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _browser("--dump-dom", measured.as_uri())
    rects = json.loads(re.search(r'<pre id="k3lab-rects">(.*?)</pre>', dom, re.S)[1].replace("&quot;", '"'))
    shot = tmp_path / "report.png"
    _browser(f"--screenshot={shot}", page.as_uri())
    img = Image.open(shot).convert("RGB")
    assert img.size == SIZE

    outlines = {node: _outline(img, box) for node, box in rects["nodes"].items()}
    marked = {node for node, (red, green) in outlines.items() if red > 50 and not green}
    green = {node for node, (red, green) in outlines.items() if green > 50 and not red}
    assert (marked, green) == ({"node0", "node1", "node2"}, {"node3"}), outlines

    assert len(rects["cells"]) == 2 * len(failures.COLUMNS)
    assert all(bottom <= SIZE[1] for _, (_, _, _, bottom) in rects["cells"]), "the Failures table is below the shot"
    empty = [cls for cls, box in rects["cells"] if _inked(img, box) < 20]
    assert not empty, f"failure cells without text in the screenshot: {empty}"
