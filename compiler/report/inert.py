"""Model-controlled text made inert for a report: names and messages come from the model
file, so a report must show them without letting them act on what reads it.

`visible` writes every character a terminal, an XML parser or a text viewer would act on
(or that XML 1.0 forbids) as a Python-style escape: C0 controls (newline and tab too: a
name is shown on one line), DEL, C1 controls, the line and paragraph separators, the
bidirectional overrides/isolates ("Trojan source") and unpaired surrogates. Everything
else, other non-ASCII text included, is kept. Each format adds its own markup escaping
(HTML entities, Markdown backslashes); JSON needs none (its encoder escapes controls).
"""

from __future__ import annotations

import re

_ACTIVE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff\ufffe\uffff]"
)


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: object) -> str:
    """`str(text)` with every active or XML-forbidden character written as an escape
    (ESC -> `\\x1b`, U+202E -> `\\u202e`)."""
    return _ACTIVE.sub(_escape, str(text))
