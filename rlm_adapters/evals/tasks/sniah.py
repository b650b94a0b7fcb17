"""S-NIAH: RULER's ``niah_single_1``, the single needle the RLM paper follows.

As RULER's ``scripts/data/synthetic/niah.py`` with its ``niah`` template builds it (NVIDIA/RULER):
- haystack: the noise passage "The grass is green. ... There and back again." repeated, one copy per line;
- needle: "One of the special magic numbers for {key} is: {value}." on its own line at a drawn position
  (uniform over the haystack lines; RULER's ``random.sample(range(num_haystack), 1)``);
- key: an adjective-noun pair from wonderwords' lists (RULER's vocabulary), value: a random 7-digit number;
- prompt: RULER's template made singular (``Some`` -> ``A``, ``are`` -> ``is``, ``numbers`` -> ``number``) with
  the answer prefix appended, as RULER sends ``input + answer_prefix``;
- length: the largest haystack whose whole prompt plus 128 output tokens fits the target (o200k_base, the
  tokenizer of the paper's GPT-5); RULER finds it once per length by binary search, here per instance;
- score: ``string_match_all``; the paper runs 50 instances per length.
"""

from __future__ import annotations

import functools
import random
from importlib import resources

from rlm_adapters._extras import require
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.scorers import ruler_string_match_all
from rlm_adapters.evals.tasks.base import Instance, TaskName, instance_id
from rlm_adapters.evals.tokens import count_tokens

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic numbers for {key} is: {value}."
HEAD = (
    "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you about "
    "the number afterwards.\n"
)
QUESTION = "What is the special magic number for {key} mentioned in the provided text?"
ANSWER_PREFIX = " The special magic number for {key} mentioned in the provided text is"
TOKENS_TO_GENERATE = 128


@functools.cache
def key_words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """wonderwords' adjective and noun lists, the vocabulary of RULER's keys."""
    require("wonderwords", extra="eval", feature="S-NIAH keys (RULER's word lists)")
    assets = resources.files("wonderwords").joinpath("assets")

    def words(name: str) -> tuple[str, ...]:
        return tuple(sorted({w.strip() for w in assets.joinpath(name).read_text("utf-8").splitlines() if w.strip()}))

    return words("adjectivelist.txt"), words("nounlist.txt")


class SniahTask:
    """RULER's single needle in a haystack, as the RLM paper runs it."""

    name: TaskName = "sniah"

    def generate(self, length: int, n: int, seed: int) -> list[Instance]:
        """`n` prompts whose tokens plus 128 output tokens fit `length` as tightly as whole lines allow."""
        rng = random.Random(f"sniah-paper-{seed}-{length}")
        adjectives, nouns = key_words()
        line = count_tokens(NOISE + "\n")
        instances = []
        for index in range(n):
            key = f"{rng.choice(adjectives)}-{rng.choice(nouns)}"
            value = str(rng.randint(10**6, 10**7 - 1))
            needle = NEEDLE.format(key=key, value=value)
            tail = "\n" + QUESTION.format(key=key) + ANSWER_PREFIX.format(key=key)
            # The o200k pre-tokenizer never joins across a newline followed by a letter, so the prompt's tokens
            # are the sum of its newline-ended pieces (tested against whole-prompt counts).
            fixed = count_tokens(HEAD) + count_tokens(needle + "\n") + count_tokens(tail.lstrip("\n"))
            lines = (length - TOKENS_TO_GENERATE - fixed) // line
            if lines < 1:
                raise ConfigurationError(f"S-NIAH length {length!r} leaves no room for a haystack line")
            position = rng.randrange(lines)
            haystack = [NOISE] * lines
            haystack.insert(position, needle)
            instances.append(
                Instance(
                    id=instance_id(self.name, length, seed, index),
                    task=self.name,
                    length=length,
                    context="\n".join(haystack),
                    question=QUESTION.format(key=key),
                    gold=[value],
                    kind="noise",
                    metadata={
                        "depth": round(position / lines, 4),
                        "key": key,
                        "haystack_lines": lines,
                        "tokens": fixed + lines * line + TOKENS_TO_GENERATE,
                    },
                    layout="wrapped",
                    prompt_head=HEAD,
                    prompt_tail=tail,
                )
            )
        return instances

    def score(self, answer: str, instance: Instance) -> float:
        """RULER's string_match_all."""
        return ruler_string_match_all(answer, instance.gold)
