"""`--format html` / `npuc compile --report X.html`: one self-contained page whose plotted data
are the prover's exact pieces, with every site, the graph linked to them, host-placed ops
marked, the tables, the ledger and the run's reference/target/policy/versions."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from cli_helpers import EXAMPLES, REPO, assert_one_line_error

from compiler.cli import npuc as cli_npuc
from compiler.cli import prover as cli_prover
from prover import terms as T
from prover.domain import NUMPY

pytest.importorskip("matplotlib", reason="the HTML report needs the 'report' extra (matplotlib)")

SHOWCASE = str(EXAMPLES / "showcase.onnx")


@pytest.fixture(scope="module")
def showcase_html(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("html") / "r.html"
    assert cli_prover.main(["check", SHOWCASE, "--no-progress", "--format", "html", "-o", str(out)]) == 1  # fmt: skip
    return out.read_text(encoding="utf-8")


def test_page_is_self_contained(showcase_html):
    h = showcase_html
    assert h.startswith("<!DOCTYPE html>") and h.rstrip().endswith("</html>")
    for bad in ("<script", "<link", "<iframe", "@import", "src=", "url(http", "<metadata"):
        assert bad not in h, bad
    refs = re.findall(r'(?:xlink:)?href="([^"]*)"', h)
    assert refs and all(r.startswith("#") for r in refs), {r for r in refs if not r.startswith("#")}
    assert h.count("<svg") >= 6  # graph, headline, 2 epilogues, 2 tables, ledgers


def test_every_site_has_a_section_and_the_graph_links_to_it(showcase_html):
    h = showcase_html
    graph = h[h.index('<div id="graph"') : h.index('<div id="headline"')]
    for sid, verdict in (("site-0", "proven"), ("site-1", "refuted"), ("site-2", "rejected"), ("site-3", "rejected")):  # fmt: skip
        assert f'<section id="{sid}" class="site-{verdict}">' in h
        assert f'href="#{sid}"' in graph
    # host-placed ops (the refuted table) carry a badge in the graph; the Transpose after
    # the NPU matmul is an NPU gather (its index map proven), no host op
    assert len(re.findall(r">host<", graph)) == 1
    for colour in ("#2e9e4f", "#d64545", "#8a8f98"):
        assert colour in graph


def test_site_details_counterexample_and_table(showcase_html):
    h = showcase_html
    s1 = h[h.index('<section id="site-1"') : h.index('<section id="site-2"')]
    assert "<code>refuted</code>" in s1 and "acc=-6634" in s1
    assert "what you can do" in s1 and "bounded:N" in s1
    assert "segments" in s1  # solver
    assert "input X" in s1 and "Y_lut[0, 3]: 39 vs 40" in s1
    assert "1 differing of 256" in s1
    assert '<td>-20</td><td>39</td><td class="diff">40</td>' in s1
    assert "beyond the policy on 1 piece(s): [-6851, -6634]" in s1
    s2 = h[h.index('<section id="site-2"') : h.index('<section id="site-3"')]
    assert "multiple_users" in s2 and "Epilogue" not in s2  # rejected: nothing was proved


def test_meta_names_reference_target_policy_versions(showcase_html):
    h = showcase_html
    meta = h[h.index('<section id="meta"') :]
    for needle in ("<b>onnx</b>", "npu_float", "bitwise", "onnxruntime", "z3-solver", "python"):
        assert needle in meta, needle
    assert "sig_lut stays on the host" in meta  # host placement diagnostic
    assert "model total" in h[h.index('<section id="ledger"') :]


def test_plotted_pieces_are_the_exact_epilogue(tmp_path):
    """The data behind the plots equal both sides evaluated at every accumulator value."""
    from compiler.cli.check_run import CheckOptions, run_pipeline
    from compiler.passes.gate import obligations
    from compiler.report.views import collect

    run = run_pipeline(SHOWCASE, CheckOptions(progress=False))
    views = collect(run)
    site = run.result.site("site-1")
    (ob, _, _) = next(x for x in obligations(run.result.graph, site, run.result.context) if x[0].kind == "epilogue")  # fmt: skip
    assert ob.hash == site.obligation_hash  # what is drawn is what was decided
    ev = views.sites["site-1"].epilogues[0]
    xs = np.arange(ev.lo, ev.hi + 1, dtype=np.int64)
    assert (ev.lo, ev.hi) == ob.ranges["acc"]
    b = np.asarray(T.evaluate(ob.outputs_before[0], NUMPY, {"acc": xs}))
    a = np.asarray(T.evaluate(ob.outputs_after[0], NUMPY, {"acc": xs}))
    i = np.searchsorted(ev.starts, xs, side="right") - 1
    assert np.array_equal(ev.before[i], b) and np.array_equal(ev.after[i], a)
    bad = np.nonzero(b != a)[0]
    assert ev.violations == [(int(xs[bad[0]]), int(xs[bad[-1]]))]
    assert ev.cex == -6634 and ev.max_diff == 1
    assert ev.tails[0][0] == ev.lo and ev.tails[1][1] == ev.hi
    assert np.all(b[: ev.tails[0][1] - ev.lo + 1] == b[0])  # lower tail constant
    assert ev.table is not None and list(ev.table.index[ev.table.differing]) == [-20]


def test_bounded_policy_shows_the_reached_max(tmp_path):
    out = tmp_path / "b.html"
    args = ["check", SHOWCASE, "--policy", "bounded:1", "--no-progress", "--format", "html"]
    assert cli_prover.main([*args, "-o", str(out)]) == 0
    h = out.read_text()
    s1 = h[h.index('<section id="site-1"') : h.index('<section id="site-2"')]
    assert "largest |fused - original| reached: 1 first at acc=-6851 (policy bound 1)" in s1
    assert "<th>max difference reached</th><td>1</td>" in s1


def test_npuc_report_format_follows_the_suffix(tmp_path):
    prog = str(tmp_path / "p.npuprog")
    for name, start in (
        ("r.html", "<!DOCTYPE html>"),
        ("r.md", "### Fusion check"),
        ("r.json", "{"),
    ):
        rep = tmp_path / name
        assert cli_npuc.main(["compile", SHOWCASE, "-o", prog, "--report", str(rep), "--no-progress"]) == 0  # fmt: skip
        assert rep.read_text().startswith(start), name
    html = (tmp_path / "r.html").read_text()
    s0 = html[html.index('<section id="site-0"') : html.index('<section id="site-1"')]
    assert "Ledger (measured on the simulator)" in s0


BLOCK_MPL = (
    "import sys; sys.modules['matplotlib'] = None; from compiler.{mod} import main; "
    "sys.exit(main({argv!r}))"
)


@pytest.mark.parametrize(
    "mod, argv",
    [
        ("cli.prover", ["check", SHOWCASE, "--format", "html", "-o", "x.html"]),
        ("cli.npuc", ["compile", SHOWCASE, "-o", "x.npuprog", "--report", "x.html"]),
    ],
)
def test_missing_matplotlib_is_a_one_line_error(mod, argv, tmp_path):
    code = BLOCK_MPL.format(mod=mod, argv=[*argv, "--no-progress"])
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300, env=_env())  # fmt: skip
    assert_one_line_error(p, "matplotlib", 'pip install "npu-fusion-prover[report]"')
    assert not (tmp_path / "x.html").exists() and not (tmp_path / "x.npuprog").exists()


def _env() -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    return env


def test_model_controlled_names_are_escaped(tmp_path):
    """Node names come from the model file: the page must show them, never run them."""
    import onnx
    from models import matmul_activation

    m = matmul_activation()
    hostile = ['<script>alert("x")</script>', "<img src=x onerror=alert(1)>"]
    for node, name in zip(m.graph.node, hostile, strict=False):
        node.name = name
    path = tmp_path / "hostile.onnx"
    onnx.save(m, path)
    out = tmp_path / "h.html"
    assert cli_prover.main(["check", str(path), "--no-progress", "--format", "html", "-o", str(out)]) in (0, 1)  # fmt: skip
    h = out.read_text()
    assert "<script" not in h and "<img" not in h
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in h  # shown, escaped
