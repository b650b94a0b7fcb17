"""Request keys: a digest of everything that decides a reply, and which occurrence of it in the run.

The digest covers the client's identity (backend, endpoint, model, request settings: `core.lm.client_identity`)
and the messages, as canonical JSON (sorted keys, no spaces, UTF-8), with a version that changes whenever
this encoding does. The key adds the request's *occurrence number* in its run: the first time a run sends a
request it is ``#0``, the second time ``#1``, and so on.

Why an occurrence number rather than one reply per request: each call is a call. A sampled model may answer
the same prompt differently, and code relies on that (``llm_query_batched([p] * 5)`` to vote); sharing one
reply would make the five answers one. With occurrences, the first run stores five replies and a resumed run
gets the same five, in the order its calls ask for them. Calls of one batch take their numbers in the order
the batch lists them (each takes its number before its first wait), so a resumed batch gets its replies back
in place. Were two identical concurrent calls ever numbered the other way round, each would still get a reply
the model really gave to that very request: only the printed order could differ, and then the rest of the run
goes live, which is correct and costs only what follows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

KEY_VERSION = 2  # 2: headers, query strings and every setting at any depth are hashed (issue 35)


def canonical(value: Any) -> bytes:
    """`value` as canonical JSON bytes (sorted keys, compact, UTF-8; anything else as its type's name)."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_opaque, allow_nan=True
    ).encode("utf-8", "surrogatepass")


def _opaque(value: Any) -> str:
    kind = type(value)
    return f"<{kind.__module__}.{kind.__qualname__}>"


def identity_digest(identity: Mapping[str, Any]) -> str:
    """The digest of a client's identity (computed once per client and run)."""
    return hashlib.sha256(canonical([KEY_VERSION, identity])).hexdigest()


def request_digest(identity: str, messages: Sequence[Mapping[str, Any]]) -> str:
    """The digest of one request: the client's identity digest and the messages."""
    digest = hashlib.sha256(identity.encode("ascii"))
    digest.update(b"\n")
    digest.update(canonical(list(messages)))
    return digest.hexdigest()


def call_key(request: str, occurrence: int) -> str:
    """The cache key of the `occurrence`-th (from 0) sending of `request` in one run."""
    return f"{request}#{occurrence}"
