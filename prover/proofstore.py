"""Content-addressed proof store: one JSON record per obligation hash.

Layout: `<root>/<hash[:2]>/<hash>.json`. A record holds the obligation's (or column
family's: `prover.family`)
canonical JSON, the verdict (policy, solver and version, time, budget,
counterexample) and a sha256 `digest` over everything else, so an edited
record, or one filed under the wrong hash, is rejected (`StoreCorrupt`).
Modes: `rw` (read and write), `ro` (read only; a miss raises `StoreMiss`,
for CI), `off` (neither). `unknown` verdicts are never stored.

The digest stops accidents, not forgery: anyone can recompute it. So a record
is never trusted on its word (`prover.api.check` decides what to serve): a
stored "proven" is re-decided within `recheck_budget_s`, a stored refutation is
replayed, and only a "proven" that cannot be re-decided within the budget is
served on a valid HMAC-SHA256 `signature` by the store's `key` (configured by
the user, e.g. env `NPUFUSION_PROOF_KEY`); otherwise it counts as missing.

Many processes may share one store: a record is written whole or not at all
(`prover.store_files`), a record another process removes meanwhile is a miss, and
concurrent writers of one obligation keep the first sound record of its verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import StoreCorrupt, StoreMiss
from .obligation import Obligation
from .store_files import remove_stale_temps, write_atomic
from .terms import canonical
from .trust import DEFAULT_RECHECK_BUDGET_S, sign, verify
from .verdict import Verdict

if TYPE_CHECKING:
    from .family import Family

FORMAT = "npu-prover-proof/1"
MODES = ("rw", "ro", "off")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class StoredRecord:
    """A record read from the store: its verdict, where it is, and its signature state.

    `signature` is "valid", "invalid" (signed by another key, or edited), "absent"
    (unsigned), or "no key" (signed, but this store has no key to verify it); it is
    verified when first asked (a record served by re-deciding it never needs the HMAC).
    """

    verdict: Verdict
    path: Path
    _signature: Callable[[], str] = field(repr=False, compare=False)

    @cached_property
    def signature(self) -> str:
        return self._signature()


class ProofStore:
    """Proof records under `root`, in mode `rw`, `ro` or `off`.

    `key` signs written records and verifies read ones; `recheck_budget_s` is how
    long `prover.api.check` may spend re-deciding a stored "proven" before it
    requires a valid signature instead (0 = always require one).
    """

    def __init__(
        self,
        root: str | os.PathLike = "proofs",
        mode: str = "rw",
        key: bytes | None = None,
        recheck_budget_s: float = DEFAULT_RECHECK_BUDGET_S,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"bad proof store mode {mode!r}; known: {', '.join(MODES)}")
        if not recheck_budget_s >= 0:
            raise ValueError(f"recheck budget must be >= 0 seconds, got {recheck_budget_s}")
        self.root = Path(root)
        self.mode = mode
        self.key = key
        self.recheck_budget_s = float(recheck_budget_s)

    def path(self, h: str) -> Path:
        return self.root / h[:2] / f"{h}.json"

    def get(self, ob: Obligation | Family) -> Verdict | None:
        """The stored verdict of `ob`, None on a miss (`StoreMiss` in ro mode); not yet trusted."""
        rec = self.lookup(ob)
        return None if rec is None else rec.verdict

    def lookup(self, ob: Obligation | Family) -> StoredRecord | None:
        """The record of `ob` with its signature state; None on a miss (`StoreMiss` in ro)."""
        if self.mode == "off":
            return None
        p = self.path(ob.hash)
        try:
            text = p.read_text()
        except FileNotFoundError:  # never written, or removed by another process meanwhile
            if self.mode == "ro":
                raise StoreMiss(
                    f"no proof record for obligation {ob.hash} in {self.root} (ro mode)"
                ) from None
            return None
        except OSError as e:
            raise StoreCorrupt(f"unreadable proof record {p}: {e}") from None
        return self._load(p, text, ob)

    def _load(self, p: Path, text: str, ob: Obligation | Family) -> StoredRecord:
        try:
            rec = json.loads(text)
        except ValueError as e:
            raise StoreCorrupt(f"unreadable proof record {p}: {e}") from None
        if not isinstance(rec, dict) or rec.get("format") != FORMAT:
            raise StoreCorrupt(f"proof record {p} has an unknown format")
        body = {k: v for k, v in rec.items() if k != "digest"}
        if rec.get("digest") != _sha(canonical(body)):
            raise StoreCorrupt(f"proof record {p} was modified: digest mismatch")
        # The obligation's own hash (computed once, `Obligation.hash`) names the record; its
        # text must be that obligation's (compared parsed: no second serialisation + hash).
        if rec.get("obligation_hash") != ob.hash or p.stem != ob.hash:
            raise StoreCorrupt(f"proof record {p} is filed under the wrong hash")
        if rec.get("obligation") != json.loads(ob.canonical):
            raise StoreCorrupt(f"proof record {p}: obligation does not match its hash")
        try:
            v = Verdict.from_dict(rec["verdict"])
        except (KeyError, TypeError, ValueError) as e:
            raise StoreCorrupt(f"proof record {p}: malformed verdict ({e})") from None
        if v.status == "unknown" or str(v.policy) != str(ob.policy) or v.obligation_hash != ob.hash:
            raise StoreCorrupt(f"proof record {p}: verdict inconsistent with its obligation")
        return StoredRecord(v, p, lambda: self._signature_state(rec))

    def _signature_state(self, rec: dict[str, Any]) -> str:
        sig = rec.get("signature")
        if not isinstance(sig, dict) or "mac" not in sig:
            return "absent"
        if self.key is None:
            return "no key"
        unsigned = {k: v for k, v in rec.items() if k not in ("digest", "signature")}
        return "valid" if verify(self.key, sig, unsigned) else "invalid"

    def put(
        self, ob: Obligation | Family, v: Verdict, extra: dict[str, Any] | None = None
    ) -> Path | None:
        """Write the record of a decided verdict (rw mode only; signed if the store has a key),
        atomically (`store_files.write_atomic`); a record already there with the same
        verdict is kept (`_holds`)."""
        if self.mode != "rw" or v.status == "unknown":
            return None
        p = self.path(ob.hash)
        if not extra and self._holds(p, ob, v):
            return p
        body: dict[str, Any] = {
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
        body.pop("signature", None)
        body.pop("digest", None)
        if self.key is not None:
            body["signature"] = sign(self.key, body)
        body["digest"] = _sha(canonical(body))
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, (json.dumps(body, indent=1, sort_keys=True) + "\n").encode())
        remove_stale_temps(p.parent)
        return p

    def _holds(self, p: Path, ob: Obligation | Family, v: Verdict) -> bool:
        """Whether `p` already holds a sound record of the same verdict of `ob` (signed by
        this store's key, if it has one): then it is kept, not rewritten, so concurrent
        writers of one obligation agree on its bytes and a run record relying on them
        stays valid. Anything else (missing, corrupt, another verdict) is replaced."""
        try:
            old = self._load(p, p.read_text(), ob)
        except (OSError, StoreCorrupt):
            return False
        if self.key is not None and old.signature != "valid":
            return False
        a, b = old.verdict, v
        cex = (None if c is None else c.to_dict() for c in (a.counterexample, b.counterexample))
        return (a.status, a.max_diff, next(cex)) == (b.status, b.max_diff, next(cex))
