"""Which generators and which scorers an evaluation uses, and the harness version in every result key.

- ``paper`` (the default protocol): each task is built as its original builds it (RULER for S-NIAH,
  oolong-synth for OOLONG, the RLM paper's appendix for OOLONG-Pairs, LongBench v2 for CodeQA), with the
  original prompt template, so that a score can be set beside the paper's.
- ``legacy``: the generators this harness had before it followed the originals (kept so that older
  results can be reproduced).

Scoring is chosen separately: ``paper`` reproduces each original scorer's decisions; ``lenient`` keeps
this harness's older, more forgiving scorers. Every report names both.
"""

from __future__ import annotations

from typing import Literal

ProtocolName = Literal["paper", "legacy"]
ScoringName = Literal["paper", "lenient"]
PROTOCOLS: tuple[ProtocolName, ...] = ("paper", "legacy")
SCORINGS: tuple[ScoringName, ...] = ("paper", "lenient")
# Bumped whenever a generator, prompt or scorer changes what a stored result means.
HARNESS_VERSION = "2"


def check_protocol(value: str) -> ProtocolName:
    """`value` as a protocol name.

    Raises:
        ValueError: naming the value and the known protocols.
    """
    for name in PROTOCOLS:
        if name == value:
            return name
    raise ValueError(f"unknown protocol {value!r}; use one of {', '.join(PROTOCOLS)}")


def check_scoring(value: str) -> ScoringName:
    """`value` as a scoring name.

    Raises:
        ValueError: naming the value and the known scorings.
    """
    for name in SCORINGS:
        if name == value:
            return name
    raise ValueError(f"unknown scoring {value!r}; use one of {', '.join(SCORINGS)}")
