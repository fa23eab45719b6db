"""The HTML report of a shipped example in a real browser (headless Chromium): the graph
and the headline plot are visible (non-blank pixels in their boxes) and the page logs no
console message. Controls show both checks can fail. `.ci/run` installs Debian's `chromium`;
where no browser could be installed this module skips and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import EXAMPLES

pytest.importorskip("matplotlib", reason="the HTML report needs the 'report' extra (matplotlib)")
Image = pytest.importorskip("PIL.Image", reason="pillow (a matplotlib dependency) reads the PNG")

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((b for b in (shutil.which(n) for n in BROWSERS) if b), None)
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="no headless Chromium on this machine (`apt-get install chromium`, as .ci/run does)",
)

WINDOW = (1300, 900)
# The overview band's fixed geometry (compiler/report/template.html): header 72px, 16px padding,
# boxes 400px high; the graph 640px wide at x=16, the headline plot 600px wide at x=672.
GRAPH_BOX = (16, 88, 656, 488)
PLOT_BOX = (672, 88, 1272, 488)
INSET = 12  # stay off the boxes' rounded borders


def screenshot(html: Path, out: Path, profile: Path, window: tuple[int, int] = WINDOW) -> str:
    """Render `html` in headless Chromium to `out` (PNG) in a window of `window` pixels;
    returns the browser's log."""
    cmd = [
        BROWSER,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        f"--screenshot={out}",
        f"--window-size={window[0]},{window[1]}",
        html.resolve().as_uri(),
    ]
    env = {**os.environ, "HOME": str(profile)}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert out.is_file(), f"chromium wrote no screenshot (exit {p.returncode}): {p.stderr[-800:]}"
    return p.stderr + p.stdout


def console_errors(log: str) -> list[str]:
    """Console messages and uncaught errors in Chromium's log (the report has no scripts,
    so any console message at all is a defect)."""
    return [ln for ln in log.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


def ink(
    png: Path, box: tuple[int, int, int, int], window: tuple[int, int] = WINDOW
) -> tuple[float, int]:
    """(fraction of pixels in `box` that are not the box's white background, number of
    distinct colours there)."""
    x0, y0, x1, y1 = box
    px = pixels(png, window)[y0 + INSET : y1 - INSET, x0 + INSET : x1 - INSET].reshape(-1, 3)
    dark = int(np.count_nonzero(px.min(axis=1) < 235))
    return dark / len(px), len(np.unique(px, axis=0))


def pixels(png: Path, window: tuple[int, int] = WINDOW) -> np.ndarray:
    """The screenshot as an (height, width, 3) uint8 array."""
    im = Image.open(png).convert("RGB")
    assert im.size == window, im.size
    return np.asarray(im)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, Path, str]:
    from compiler.cli.prover import main

    d = tmp_path_factory.mktemp("browser")
    html = d / "showcase.html"
    args = ["check", str(EXAMPLES / "showcase.onnx"), "--no-progress", "--format", "html"]
    assert main([*args, "-o", str(html)]) == 1
    png = d / "showcase.png"
    log = screenshot(html, png, d / "profile")
    return html, png, log


def test_graph_and_plot_are_visible(rendered):
    _, png, _ = rendered
    g_ink, g_colours = ink(png, GRAPH_BOX)
    p_ink, p_colours = ink(png, PLOT_BOX)
    assert g_ink > 0.03 and g_colours > 8, (g_ink, g_colours)
    assert p_ink > 0.02 and p_colours > 8, (p_ink, p_colours)
    x0, y0, x1, y1 = GRAPH_BOX
    graph = pixels(png)[y0:y1, x0:x1].reshape(-1, 3).astype(int)

    def has(rgb: tuple[int, int, int]) -> bool:
        return bool(np.any(np.abs(graph - np.array(rgb)).max(axis=1) < 40))

    assert has((0x2E, 0x9E, 0x4F)), "no proven (green) node drawn"
    assert has((0xD6, 0x45, 0x45)), "no refuted (red) node drawn"


def test_page_logs_no_console_errors(rendered):
    _, _, log = rendered
    assert console_errors(log) == []


def test_blank_boxes_are_detected(rendered, tmp_path):
    """Control: the same page with the graph and plot emptied fails the ink check."""
    html, _, _ = rendered
    text = html.read_text()
    a, b = text.index('<div id="graph"'), text.index("<main>")
    blank = text[:a] + '<div id="graph"></div>\n<div id="headline"></div>\n</div>\n' + text[b:]
    page = tmp_path / "blank.html"
    page.write_text(blank)
    png = tmp_path / "blank.png"
    screenshot(page, png, tmp_path / "profile")
    assert ink(png, GRAPH_BOX)[0] < 0.001
    assert ink(png, PLOT_BOX)[0] < 0.001


def test_console_errors_are_detected(tmp_path):
    """Control: a page whose script throws is caught by the log scan."""
    page = tmp_path / "bad.html"
    page.write_text("<html><body><p>x</p><script>undefined_function();</script></body></html>")
    log = screenshot(page, tmp_path / "bad.png", tmp_path / "profile")
    errs = console_errors(log)
    assert errs and "undefined_function" in errs[0]


# Measures the laid-out page (added to a copy of it; the report itself has no scripts): every
# HTML element (and each inline <svg>) that reaches past the window's right edge, outside a
# scrolling container (a wide table scrolls in place: not clipped), and the boxes of the
# graph and the headline plot.
FIT_JS = """<script>
(function () {
  const w = document.documentElement.clientWidth;
  const scrolls = (e) => { for (let a = e.parentElement; a; a = a.parentElement) {
    const o = getComputedStyle(a).overflowX; if (o === "auto" || o === "scroll") return true; }
    return false; };
  const over = [];
  for (const e of document.querySelectorAll("body *")) {
    if (e.namespaceURI !== "http://www.w3.org/1999/xhtml" && e.tagName !== "svg") continue;
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.right > w + 0.5 && !scrolls(e)) over.push(e.tagName + " " + Math.ceil(r.right));
  }
  const box = (id) => { const r = document.getElementById(id).getBoundingClientRect();
    return [r.left, r.top, r.right, r.bottom].map(Math.round); };
  console.log("FIT " + JSON.stringify({width: w, scroll: document.documentElement.scrollWidth,
    over: over.slice(0, 8), graph: box("graph"), headline: box("headline")}));
})();
</script>"""


def fit(html: Path, width: int, tmp: Path, extra: str = "") -> tuple[dict, Path]:
    """(the page's measurements in a window `width` px wide, its screenshot); `extra` is
    HTML added at the top of the body (the control's too-wide element)."""
    import json
    import re

    page = tmp / f"fit{width}.html"
    text = html.read_text(encoding="utf-8").replace("<body>", "<body>" + extra, 1)
    page.write_text(text.replace("</body>", FIT_JS + "</body>"), encoding="utf-8")
    png = tmp / f"fit{width}.png"
    log = screenshot(page, png, tmp / "profile", (width, 900))
    m = re.search(r"FIT (\{.*\})\", source", log)
    assert m, log[-800:]
    return json.loads(m.group(1)), png


@pytest.mark.slow  # two browser runs (about 2 s each)
@pytest.mark.parametrize("width", [800, 1400])
def test_page_fits_the_window(rendered, width, tmp_path):
    """At 800 and 1400 px nothing reaches past the window (wide tables scroll in place),
    and the graph and the headline plot are drawn in their boxes."""
    html, _, _ = rendered
    got, png = fit(html, width, tmp_path)
    assert got["width"] == width and got["scroll"] <= width, got
    assert got["over"] == [], got
    for name in ("graph", "headline"):
        x0, y0, x1, y1 = got[name]
        assert 0 <= x0 < x1 <= width, (name, got)
        if y1 <= 900:  # in the screenshot (at 800 px the headline plot is below the graph)
            assert ink(png, (x0, y0, x1, y1), (width, 900))[0] > 0.02, (name, got)


@pytest.mark.slow
def test_a_too_wide_page_is_detected(rendered, tmp_path):
    """Control: the page with an element wider than the window fails the fit check."""
    html, _, _ = rendered
    got, _ = fit(html, 800, tmp_path, '<div style="width: 1290px">wide</div>')
    assert got["scroll"] > 800 and got["over"], got
