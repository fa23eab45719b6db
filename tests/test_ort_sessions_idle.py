"""ORT sessions the compiler makes leave their pool threads blocked, not spinning, when idle.

A check keeps dozens of sessions alive (constant folding of shape ops, host output types,
the region check); with more than about ten alive, workers allowed to spin kept a core busy
for the rest of the process (bench/README.md, "Idle sessions")."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_BERT = ROOT / "examples" / "zoo" / "small" / "tiny_bert__qdq_u8s8_pt.onnx"
SPIN = "session.intra_op.allow_spinning"


def _spinning(so) -> str:
    """The session's allow_spinning entry ("unset": ORT's default, which spins)."""
    try:
        return so.get_session_config_entry(SPIN)
    except RuntimeError:  # ORT raises for an entry never set
        return "unset"


def test_every_session_with_a_pool_in_a_check_does_not_spin(monkeypatch):
    """Every session a check of tiny BERT creates (its caches emptied first) either has no
    pool (one intra-op thread) or sleeps idle; and the check does create pooled sessions of
    each kind (folding, region check), so the assertion is not vacuous."""
    import onnxruntime as ort

    import compiler.ort.region_table as rt
    from compiler.api import compile_model
    from compiler.frontend import f16_context
    from compiler.ort import tables

    tables._session.cache_clear()
    f16_context.ort_graph.cache_clear()
    monkeypatch.setattr(rt, "_TABLES", {})
    monkeypatch.setattr(rt, "_UNCHECKED", {})
    seen: list[tuple[str, int, str]] = []
    real = ort.InferenceSession

    def recording(model, sess_options=None, *a, **kw):
        import traceback

        caller = traceback.extract_stack(limit=2)[0].filename
        so = sess_options or ort.SessionOptions()
        seen.append((Path(caller).name, so.intra_op_num_threads, _spinning(so)))
        return real(model, sess_options, *a, **kw)

    monkeypatch.setattr(ort, "InferenceSession", recording)
    try:
        compile_model(str(TINY_BERT))
    finally:
        tables._session.cache_clear()
    pooled = [s for s in seen if s[1] != 1]
    assert [s for s in pooled if s[2] != "0"] == []
    makers = {name for name, _, _ in pooled}
    assert {"tables.py", "region_table.py", "f16_context.py"} <= makers, seen


def test_an_unset_entry_reads_as_unset_so_the_check_above_can_fail():
    import onnxruntime as ort

    assert _spinning(ort.SessionOptions()) == "unset"
    so = ort.SessionOptions()
    so.add_session_config_entry(SPIN, "0")
    assert _spinning(so) == "0"
