"""Content-addressed proof store: one JSON record per obligation hash.

Layout: `<root>/<hash[:2]>/<hash>.json`. A record holds the obligation's
canonical JSON, the verdict (policy, solver and version, time, budget,
counterexample) and a sha256 `digest` over everything else, so an edited
record, or one filed under the wrong hash, is rejected (`StoreCorrupt`).
Modes: `rw` (read and write), `ro` (read only; a miss raises `StoreMiss`,
for CI), `off` (neither). `unknown` verdicts are never stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import StoreCorrupt, StoreMiss
from .obligation import Obligation
from .terms import canonical
from .verdict import Verdict

FORMAT = "npu-prover-proof/1"
MODES = ("rw", "ro", "off")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class ProofStore:
    """Proof records under `root` (default `proofs/`), in mode `rw`, `ro` or `off`."""

    def __init__(self, root: str | os.PathLike = "proofs", mode: str = "rw") -> None:
        if mode not in MODES:
            raise ValueError(f"bad proof store mode {mode!r}; known: {', '.join(MODES)}")
        self.root = Path(root)
        self.mode = mode

    def path(self, h: str) -> Path:
        return self.root / h[:2] / f"{h}.json"

    def get(self, ob: Obligation) -> Verdict | None:
        """The stored verdict of `ob`, None on a miss (`StoreMiss` in ro mode)."""
        if self.mode == "off":
            return None
        p = self.path(ob.hash)
        if not p.exists():
            if self.mode == "ro":
                raise StoreMiss(
                    f"no proof record for obligation {ob.hash} in {self.root} (ro mode)"
                )
            return None
        return self._load(p, ob)

    def _load(self, p: Path, ob: Obligation) -> Verdict:
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise StoreCorrupt(f"unreadable proof record {p}: {e}") from None
        if not isinstance(rec, dict) or rec.get("format") != FORMAT:
            raise StoreCorrupt(f"proof record {p} has an unknown format")
        body = {k: v for k, v in rec.items() if k != "digest"}
        if rec.get("digest") != _sha(canonical(body)):
            raise StoreCorrupt(f"proof record {p} was modified: digest mismatch")
        if _sha(canonical(rec["obligation"])) != rec["obligation_hash"]:
            raise StoreCorrupt(f"proof record {p}: obligation does not match its hash")
        if rec["obligation_hash"] != ob.hash or p.stem != ob.hash:
            raise StoreCorrupt(f"proof record {p} is filed under the wrong hash")
        v = Verdict.from_dict(rec["verdict"])
        if v.status == "unknown" or str(v.policy) != str(ob.policy) or v.obligation_hash != ob.hash:
            raise StoreCorrupt(f"proof record {p}: verdict inconsistent with its obligation")
        return v

    def put(self, ob: Obligation, v: Verdict, extra: dict[str, Any] | None = None) -> Path | None:
        """Write the record of a decided verdict (rw mode only); returns its path."""
        if self.mode != "rw" or v.status == "unknown":
            return None
        body = {
            "format": FORMAT,
            "obligation_hash": ob.hash,
            "obligation": ob.to_json(),
            "verdict": v.to_dict(),
            "policy": str(ob.policy),
            "solver": v.solver,
            "solver_version": v.details.get("solver_version", ""),
            "time_ms": v.time_ms,
            "budget": v.details.get("budget", {}),
            "counterexample": None if v.counterexample is None else v.counterexample.to_dict(),
            **(extra or {}),
        }
        body["digest"] = _sha(canonical(body))
        p = self.path(ob.hash)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, p)
        return p
