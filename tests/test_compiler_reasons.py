"""One vocabulary: every reason code has its text and action in one place, the rules'
docstrings are what the reports show, and the legality rules are pure."""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from models import matmul_activation
from report_fixtures import sample_report

from compiler.frontend.reader import to_ir
from compiler.ir.context import Context
from compiler.ir.reasons import ACTIONS, OTHER_REASONS, REASON_CODES, Reason, doc_text, explain
from compiler.ir.reasons import rules as registered_rules
from compiler.passes import cleanup, legality, propose
from compiler.report import html as report_html
from compiler.report import sarif as report_sarif
from compiler.report.model import Report, SiteReport
from npu_backend.target import load_target
from npu_backend.validate import CODES as BACKEND_CODES
from prover.policy import Policy
from prover.verdict import ReasonCode, Status

ROOT = Path(__file__).resolve().parent.parent
FLOAT = load_target("npu_backend/targets/npu_float.toml")
FIXED = load_target("npu_backend/targets/npu_fixed.toml")
DESIGN_CODES = {
    "not_adjacent",
    "intervening_requantize",
    "intervening_clip",
    "multiple_users",
    "already_fused",
    "unsupported_function",
    "unsupported_intermediate_type",
    "layout_mismatch",
    "incomplete_parameters",
    "grouped_codegen_unsupported",
    "refuted",
    "unknown",
    "reference_divergence",
    "float_accumulation",
    "unsupported_op",
}


def test_every_reason_code_has_a_text_and_an_action():
    assert DESIGN_CODES <= {c.value for c in ReasonCode}
    for code in ReasonCode:
        e = explain(code)
        assert len(e.text.split()) >= 6 and e.text.endswith((".", ")")), code
        assert len(e.action.split()) >= 4, code
        assert REASON_CODES[code] == e.text and ACTIONS[code] == e.action
    assert set(REASON_CODES) == set(ACTIONS) == {c.value for c in ReasonCode}
    with pytest.raises(ValueError):
        explain("not_a_code")
    with pytest.raises(KeyError):
        ACTIONS["not_a_code"]


def test_each_code_has_exactly_one_source():
    rule_codes = [r.code for r in registered_rules()]
    assert len(rule_codes) == len(set(rule_codes)) == 13
    assert not set(rule_codes) & set(OTHER_REASONS)
    assert set(rule_codes) | set(OTHER_REASONS) == set(ReasonCode)
    # the legacy (code, function) list is the registry, in run order
    assert [(r.code.value, r.check) for r in registered_rules()] == legality.RULES


def test_the_registry_imports_no_rule_and_a_report_loads_them():
    """`compiler.ir.reasons` imports no pass: alone, a rule's code is an InternalError
    naming the module to import (never a wrong text); the report model loads the rules."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from compiler.ir.reasons import explain\n"
        "assert 'compiler.passes.legality' not in sys.modules\n"
        "print(explain('unsupported_op').action != '')\n"
        "try:\n"
        "    explain('not_adjacent')\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
        "import compiler.report.model\n"
        "print(explain('not_adjacent').text == compiler.report.model.REASON_CODES['not_adjacent'])\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stderr[-600:]
    assert lines[0] == "True" and lines[2] == "True"
    assert lines[1].startswith("InternalError ") and "compiler.passes.legality" in lines[1]


def test_backend_validation_codes_are_reason_codes():
    import npu_backend.validate as validate

    for code in BACKEND_CODES:
        ReasonCode(code)  # a ValueError if the backend invents one
    # and every code validate.py produces is one of them (not only the list it declares)
    tree = ast.parse(Path(validate.__file__).read_text())
    produced = {
        c.args[0].value
        for c in ast.walk(tree)
        if isinstance(c, ast.Call)
        and getattr(c.func, "id", None) == "ValidationIssue"
        and c.args
        and isinstance(c.args[0], ast.Constant)
    }
    assert len(produced) >= 4 and produced <= set(BACKEND_CODES), produced - set(BACKEND_CODES)


def test_rule_docstring_is_the_reason_text_in_every_report():
    """SARIF's rule description and the HTML site section show the rule's docstring."""
    for r in registered_rules():
        assert explain(r.code).text == doc_text(r.check) == r.text
        assert "\n" not in r.text and len(r.text.split()) > 8
    site = SiteReport(
        "s", "p", ("a",), Status.REJECTED, Reason(ReasonCode.LAYOUT_MISMATCH, "'t' moves")
    )
    log = report_sarif.sarif_log(Report("m.onnx", "bitwise", "t", [site]))
    (rule,) = log["runs"][0]["tool"]["driver"]["rules"]
    text = doc_text(legality.rule_layout)
    assert rule["id"] == "layout_mismatch"
    assert rule["fullDescription"]["text"] == rule["shortDescription"]["text"] == text
    assert site.reason.text == text and site.reason.action == ACTIONS["layout_mismatch"]
    page = report_html._site(site, None)
    assert report_html._e(text) in page and report_html._e(site.reason.action) in page


def test_reason_codes_are_checked_where_produced():
    from compiler.ir.site import Diagnostic, Site

    with pytest.raises(ValueError):
        Reason("multiple_user", "typo")
    with pytest.raises(ValueError):
        Diagnostic("unsupported_ops", ["n"], "typo")
    d = Diagnostic("unsupported_op", ["n"], "kept")
    assert d.code is ReasonCode.UNSUPPORTED_OP and d.action == ACTIONS["unsupported_op"]
    g, _ = to_ir(matmul_activation())
    s = Site(id="s", pattern="p", compute=g.nodes[0], chain=[g.nodes[-1]])
    with pytest.raises(ValueError):
        s.decide("maybe")
    s.decide("rejected", "layout_mismatch", "m")
    assert s.verdict is Status.REJECTED and s.reason.code is ReasonCode.LAYOUT_MISMATCH


def test_json_report_keeps_its_field_values():
    j = json.loads(__import__("compiler.report.json_form", fromlist=["x"]).render(sample_report()))
    assert [s["verdict"] for s in j["sites"]] == ["proven", "refuted", "unknown", "rejected"]
    assert j["sites"][3]["reason"] == {
        "code": "multiple_users",
        "message": "mm_shared output also feeds graph output; kept unfused",
        "action": ACTIONS["multiple_users"],
    }
    assert j["sites"][1]["counterexample"]["before"] == 39


# -- purity --------------------------------------------------------------------------------

CASES = {
    "proven": (lambda: matmul_activation(), FLOAT, None),
    "not_adjacent": (lambda: matmul_activation(float_roundtrip=True), FLOAT, "not_adjacent"),
    "multiple_users": (lambda: matmul_activation(extra_user="node"), FLOAT, "multiple_users"),
    "intervening_requantize": (
        lambda: matmul_activation(form="integer"),
        FLOAT,
        "intervening_requantize",
    ),
    "layout_mismatch": (lambda: matmul_activation(transpose=(1, 0)), FLOAT, "layout_mismatch"),
    "fixed_requantize": (lambda: matmul_activation(form="integer"), FIXED, None),
    "float_bias": (
        lambda: str(ROOT / "examples/digits/digits_matmul_qdq_s8s8_pt.onnx"),
        FLOAT,
        None,
    ),
}


def _proposed(model, target):
    g, m = to_ir(model)
    ctx = Context(target=target, policy=Policy(0), model=m, original=g.clone())
    for p in (cleanup, propose):
        g = p.run(g, ctx)
    assert ctx.sites
    return g, ctx


def _state(g, site):
    return (
        g.fingerprint(),
        site.verdict,
        site.reason,
        id(site.post),
        id(site.float_bias),
        repr(site.details),
        list(site.obligations),
        site.counterexample,
        [id(n) for n in site.chain],
        repr(site.compute.attrs.keys()),
    )


def _results(g, site, ctx, order):
    out = {}
    for r in order:
        got = r.check(g, site, ctx)
        out[r.name] = got if not isinstance(got, Reason) else (got.code, got.message)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_rules_are_pure_twice_and_in_any_order(case):
    make, target, code = CASES[case]
    g, ctx = _proposed(make(), target)
    rules = registered_rules()
    for site in ctx.sites:
        site.float_bias = legality.float_bias_of(g, site)  # the pass's step before the rules
        before = _state(g, site)
        first = _results(g, site, ctx, rules)
        again = _results(g, site, ctx, rules)
        backwards = _results(g, site, ctx, rules[::-1])
        shuffled = _results(
            g, site, ctx, [rules[i] for i in np.random.default_rng(1).permutation(len(rules))]
        )
        assert first == again == backwards == shuffled
        j1, j2 = legality.judge(g, site, ctx), legality.judge(g, site, ctx)
        assert (j1.reason, j1.issues, j1.post is None) == (j2.reason, j2.issues, j2.post is None)
        assert _state(g, site) == before, "a rule or judge changed the site or the graph"
        assert site.post is None and not site.details
    # the pass itself: first failing rule decides, a passing site gets its descriptor
    site = ctx.sites[0]
    legality.run(g, ctx)
    if code is None:
        assert site.verdict is None and site.post is not None
    else:
        assert site.verdict is Status.REJECTED and site.reason.code == code
        assert site.post is None


def test_rule_order_does_not_matter_for_one_failing_rule():
    """Where exactly one rule fails, every order of the rules rejects with it."""
    g, ctx = _proposed(matmul_activation(transpose=(1, 0)), FLOAT)
    (site,) = ctx.sites
    site.float_bias = legality.float_bias_of(g, site)
    failing = {n for n, v in _results(g, site, ctx, registered_rules()).items() if v is not None}
    assert failing == {"rule_layout"}
    for order in itertools.islice(itertools.permutations(registered_rules()), 0, 200, 37):
        got = next(r for r in order if r.check(g, site, ctx) is not None)
        assert got.code is ReasonCode.LAYOUT_MISMATCH


def test_incomplete_table_rejects_without_touching_the_site():
    g, ctx = _proposed(matmul_activation(), FLOAT)
    lut = next(n for n in g.nodes if n.op == "lut")
    lut.attrs["table"] = tuple(lut.attrs["table"][:-1])
    (site,) = ctx.sites
    got = legality.rule_parameters_complete(g, site, ctx)
    assert isinstance(got, str) and "table of 255 entries" in got
    assert not site.details
    legality.run(g, ctx)
    assert site.reason.code is ReasonCode.INCOMPLETE_PARAMETERS


def test_prover_statuses_are_the_shared_enum():
    """A prover Verdict is proven/refuted/unknown as `Status`, never rejected; a procedure's
    raw `Decision` (holds/violated) is a different concept with its own enum."""
    from prover.decision import Decision, Outcome
    from prover.verdict import Verdict

    v = Verdict("proven", Policy(0), "ab" * 32, "segments", 1.0)
    assert v.status is Status.PROVEN and v.to_dict()["status"] == "proven"
    assert Verdict.from_dict(v.to_dict()) == v
    with pytest.raises(ValueError):
        Verdict("rejected", Policy(0), "ab" * 32, "segments", 1.0)
    with pytest.raises(ValueError):
        Verdict("holds", Policy(0), "ab" * 32, "segments", 1.0)
    d = Decision("violated", "enumerate", witness={"acc": 1})
    assert d.status is Outcome.VIOLATED and d.decisive
    with pytest.raises(ValueError):
        Decision("refuted", "enumerate")


_CODE_WORDS = {m.value for m in ReasonCode} | {m.value for m in Status}
_PRODUCERS = {"decide", "diag", "Diagnostic", "Reason", "place_matmul", "npu_or_host"}


def _literal_codes(source: str) -> list[tuple[int, str]]:
    """Reason codes / statuses written as bare strings where one is produced or compared:
    arguments of a producer call, comparisons, a dict's "code" value, returned tuples."""
    found = []
    for node in ast.walk(ast.parse(source)):
        cands: list[ast.expr] = []
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in _PRODUCERS:
                cands = [*node.args, *(k.value for k in node.keywords)]
        elif isinstance(node, ast.Compare):
            cands = [node.left, *node.comparators]
            cands += [
                e for c in node.comparators if isinstance(c, ast.Tuple | ast.List) for e in c.elts
            ]
        elif isinstance(node, ast.Dict):
            cands = [
                v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == "code"
            ]
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
            cands = list(node.value.elts)
        found += [
            (c.lineno, c.value)
            for c in cands
            if isinstance(c, ast.Constant) and c.value in _CODE_WORDS
        ]
    return found


def test_compiler_produces_reason_codes_as_enum_members():
    bad = [
        f"{p.relative_to(ROOT)}:{line} {word!r}"
        for p in sorted((ROOT / "compiler").rglob("*.py"))
        for line, word in _literal_codes(p.read_text())
    ]
    assert not bad, "use ReasonCode / Status members: " + ", ".join(bad)


@pytest.mark.parametrize(
    "src",
    [
        'site.decide("refuted", "refuted", "m")',
        'self.diag(n, "unsupported_function", "m")',
        'Diagnostic("unsupported_op", [], "m")',
        'x = {"code": "reference_divergence"}',
        'ok = v.status == "proven"',
        'ok = d.code in ("buffers_exceed_memory",)',
        'def f():\n    return False, "unknown", "m"',
    ],
)
def test_the_reason_code_scan_sees_bare_strings(src):
    assert _literal_codes(src)


def test_the_reason_code_scan_passes_enum_members_and_other_words():
    assert not _literal_codes('site.decide(Status.REFUTED, ReasonCode.REFUTED, "m")')
    assert not _literal_codes('Outcome(cols, "refuted", "a synthesis outcome, not a code")')


def test_only_the_recognised_float_bias_group_counts_as_adjacent():
    """The float DQ -> Add -> Q bias passes `rule_adjacent` only as the group `float_bias_of`
    recognised: unrecognised, or with its range moved off those three nodes, it is rejected."""
    import dataclasses

    g, ctx = _proposed(str(ROOT / "examples/digits/digits_matmul_qdq_s8s8_pt.onnx"), FLOAT)
    site = ctx.sites[0]
    fb = legality.float_bias_of(g, site)
    assert fb is not None
    site.float_bias = fb
    assert legality.rule_adjacent(g, site, ctx) is None
    site.float_bias = None
    got = legality.rule_adjacent(g, site, ctx)
    assert isinstance(got, str) and "(DequantizeLinear, Add, QuantizeLinear)" in got
    site.float_bias = dataclasses.replace(fb, start=fb.start + 1)  # leaves the Dequantize out
    got = legality.rule_adjacent(g, site, ctx)
    assert isinstance(got, str) and "DequantizeLinear" in got and "Add," not in got


@pytest.mark.parametrize(
    "target,edit,words",
    [
        (FLOAT, "two_adds", "2 adds; the postprocessor has one"),
        (FLOAT, "clip_first", "'Clip_0' sits between the requantization and the bias"),
        (FLOAT, "no_requant", "adds before any requantization of"),
        (FIXED, "standalone_requant", "no post-requantization add stage"),
    ],
)
def test_bias_placement_rejects_each_misplaced_bias(target, edit, words):
    """Each way `bias_placement` refuses a QLinearAdd bias, on the digits site (QLinearMatMul
    -> QLinearAdd -> QLinearSigmoid) edited in its chain; the site as read passes, and a bias
    after a standalone requantize passes where the target has a post-requantization add."""
    import dataclasses

    from compiler.ir.graph import Node

    model = str(ROOT / "examples/digits/digits_matmul_qop_s8s8_pc.onnx")
    g, ctx = _proposed(model, target)
    site = ctx.sites[0]
    add, act = site.chain
    assert add.op == "qlinear_binary" and legality.bias_placement(site, ctx) is None
    no_requant = dataclasses.replace(
        site.compute, attrs={k: v for k, v in site.compute.attrs.items() if k != "requant"}
    )
    requantize = Node("r", "requantize", [], [], {}, ("Requantize_0",))
    if edit == "two_adds":
        site.chain = [add, add, act]
    elif edit == "clip_first":
        site.chain = [Node("c", "clip", [], [], {}, ("Clip_0",)), add, act]
    elif edit == "no_requant":
        site.compute = no_requant
    else:
        site.compute, site.chain = no_requant, [requantize, add, act]
    got = legality.bias_placement(site, ctx)
    assert isinstance(got, str) and words in got, got
    assert legality.rule_requantize_reproducible(g, site, ctx) == got
    if edit == "standalone_requant":
        g2, ctx2 = _proposed(model, FLOAT)
        ok = ctx2.sites[0]
        ok.compute = dataclasses.replace(ok.compute, attrs=no_requant.attrs)
        ok.chain = [requantize, *ok.chain]
        assert legality.bias_placement(ok, ctx2) is None


def test_second_requantize_and_wide_output_encoding_are_rejected():
    """MatMulInteger -> Requantize -> Sigmoid passes on npu_fixed; a second requantize, or an
    activation writing int16, is refused by its rule (neither had a negative test)."""
    import dataclasses

    g, ctx = _proposed(matmul_activation(form="integer"), FIXED)
    site = ctx.sites[0]
    rq, act = site.chain
    assert rq.op == "requantize" and act.op == "lut"
    assert legality.rule_requantize_reproducible(g, site, ctx) is None
    assert legality.rule_intermediate_type(g, site, ctx) is None
    site.chain = [rq, rq, act]
    got = legality.rule_requantize_reproducible(g, site, ctx)
    assert got.startswith("'rq', 'rq': 2 requantizations; the postprocessor has one stage")
    assert "loads no table as given" in got  # npu_fixed: no table could absorb the second
    site.chain = [rq, dataclasses.replace(act, attrs={**act.attrs, "out_type": "int16"})]
    assert legality.rule_intermediate_type(g, site, ctx) == "output encoding int16 is not supported"
