"""JUnit XML report: one test case per site (refuted = failure, unknown = error, rejected = skipped)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from compiler.report.inert import visible
from compiler.report.model import Report, Status
from compiler.report.text import counterexample_summary


def render(r: Report) -> str:
    """The report as a JUnit XML document (testsuites > testsuite > testcase)."""
    s = r.summary
    total_s = sum(x.time_ms for x in r.sites) / 1000.0
    suites = ET.Element("testsuites", name="prover check", tests=str(s.candidates))
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"prover check {r.model} ({r.policy})",
        tests=str(s.candidates),
        failures=str(s.refuted),
        errors=str(s.unknown),
        skipped=str(s.rejected),
        time=f"{total_s:.3f}",
    )
    props = ET.SubElement(suite, "properties")
    for k, v in (("model", r.model), ("policy", r.policy), ("target", r.target)):
        ET.SubElement(props, "property", name=k, value=v)
    if r.reference is not None:
        ET.SubElement(props, "property", name="reference", value=str(r.reference["name"]))
    for i, f in enumerate(r.findings):
        ET.SubElement(props, "property", name=f"finding.{i}", value=f"[{f['code']}] {f['message']}")
    for i, h in enumerate(r.host_ops):
        action = f" (action: {h.action})" if h.action else ""
        ET.SubElement(
            props, "property", name=f"host_op.{i}", value=f"[{h.code}] {h.message}{action}"
        )
    classname = Path(r.model).stem or "model"
    for site in r.sites:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"{classname}.{site.pattern}",
            name=f"{site.id} ({','.join(site.nodes)})",
            time=f"{site.time_ms / 1000.0:.3f}",
        )
        reason = site.reason
        code = reason.code if reason else site.verdict.value
        msg = reason.message if reason else ""
        if reason is not None and reason.action:
            msg += f" (action: {reason.action})"
        if site.verdict is Status.REFUTED:
            el = ET.SubElement(case, "failure", message=msg, type=code)
            if site.counterexample is not None:
                el.text = "counterexample " + counterexample_summary(site.counterexample)
        elif site.verdict is Status.UNKNOWN:
            ET.SubElement(case, "error", message=msg, type=code)
        elif site.verdict is Status.REJECTED:
            ET.SubElement(case, "skipped", message=f"[{code}] {msg}")
    for el in suites.iter():  # XML 1.0 cannot carry most control characters at all
        el.attrib = {k: visible(v) for k, v in el.attrib.items()}
        if el.text:
            el.text = visible(el.text)
    ET.indent(suites)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
