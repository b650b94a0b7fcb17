import re

import pytest

from rlm_adapters.core.lm.base import Message
from rlm_adapters.testing import turn_of


def answer_sniah(messages: list[Message]) -> str:
    """A root model that finds the needle: directly in a prompt, or with code inside an RLM run."""
    if messages[0]["role"] == "system":
        turn = turn_of(messages)
        if turn == 0:
            return "```repl\nimport re\nprint(re.search(r'is: (\\d{7})', context).group(1))\n```"
        found = re.search(r"\d{7}", messages[-1]["content"])
        return f"FINAL({found.group() if found else 'none'})"
    found = re.search(r"is: (\d{7})", messages[-1]["content"])
    return f"The number is **{found.group(1)}**." if found else "I cannot tell."


@pytest.fixture
def sniah_root():
    return answer_sniah
