"""How a stored result earns trust without being re-decided: the signing key and its HMAC.

A stored "proven" is re-decided within a recheck budget (default
`DEFAULT_RECHECK_BUDGET_S`); only where that is not done is it served on a valid
HMAC-SHA256 signature by a key the user configures (a key file, else env
`NPUFUSION_PROOF_KEY`). Anyone can recompute a plain digest; only the key holder can
sign. Imports nothing heavy, so the command line can check a signature before it loads
the prover.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path
from typing import Any

KEY_ENV = "NPUFUSION_PROOF_KEY"
SIGNATURE_ALG = "HMAC-SHA256"
DEFAULT_RECHECK_BUDGET_S = 5.0


def canonical_json(obj: Any) -> str:
    """Canonical JSON text (sorted keys, no spaces): what is hashed and signed."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def key_id(key: bytes) -> str:
    """A short public name of a key (sha256 prefix), recorded next to each signature."""
    return hashlib.sha256(b"npu-prover-proof-key:" + key).hexdigest()[:16]


def mac(key: bytes, body: dict[str, Any]) -> str:
    """The HMAC-SHA256 of `body`'s canonical JSON under `key` (hex)."""
    return hmac.new(key, canonical_json(body).encode(), hashlib.sha256).hexdigest()


def sign(key: bytes, body: dict[str, Any]) -> dict[str, str]:
    """The `signature` entry that `verify` accepts for `body` under `key`."""
    return {"alg": SIGNATURE_ALG, "key_id": key_id(key), "mac": mac(key, body)}


def verify(key: bytes, signature: Any, body: dict[str, Any]) -> bool:
    """Whether `signature` (as `sign` made it) signs exactly `body` with `key`."""
    return (
        isinstance(signature, dict)
        and signature.get("alg") == SIGNATURE_ALG
        and signature.get("key_id") == key_id(key)
        and hmac.compare_digest(str(signature.get("mac", "")), mac(key, body))
    )


def resolve_key(key_file: str | os.PathLike | None = None) -> bytes | None:
    """The signing key: the contents of `key_file`, else env `NPUFUSION_PROOF_KEY`, else None.

    Surrounding whitespace is stripped; an empty key is an error (it would sign nothing).
    """
    if key_file is not None:
        key = Path(key_file).read_bytes().strip()
        if not key:
            raise ValueError(f"proof key file is empty: {key_file}")
        return key
    env = os.environ.get(KEY_ENV)
    if env is None:
        return None
    if not env.strip():
        raise ValueError(f"{KEY_ENV} is set but empty")
    return env.strip().encode()
