"""An existing LCEL chain over a long document, with its chat model swapped for `ChatRLM`.

    export OPENAI_API_KEY=...            # or OPENAI_BASE_URL=http://localhost:8000/v1 for a local server
    export RLM_MODEL=gpt-5-mini          # optional
    python examples/langchain_chain.py

The chain is LangChain's usual ``prompt | model | parser``. Only the model line changed:
``ChatOpenAI(model=MODEL)`` became ``ChatRLM(model=MODEL)``, so the 2.7 MB log no longer has to fit in a
context window: it lives in a sandboxed REPL, and the root model reads it with code and sub-calls.
"""

from __future__ import annotations

import os
import random

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from rlm_adapters.langchain import ChatRLM

MODEL = os.environ.get("RLM_MODEL", "gpt-5-mini")


def make_log(lines: int = 40_000, seed: int = 0) -> str:
    """Last night's service log (about 2.7 MB) with one failure buried in it."""
    rng = random.Random(seed)
    services = ["api-gateway", "auth", "search", "billing", "notifications", "payments-db"]
    entries = [
        f"2026-11-28T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d} INFO {rng.choice(services)} "
        f"request {rng.randrange(10**8)} served in {rng.randrange(2, 900)} ms"
        for n in range(lines)
    ]
    entries[lines * 3 // 5] = "2026-11-28T06:40:00 ERROR payments-db: disk full on /data (incident 4471)"
    return "\n".join(entries)


prompt = ChatPromptTemplate.from_messages(
    [
        ("system", "You are an on-call engineer. Answer in one sentence."),
        ("human", "Here is last night's service log:\n\n{log}\n\nQuestion: {question}"),
    ]
)
model = ChatRLM(model=MODEL)  # was: ChatOpenAI(model=MODEL)
chain = prompt | model | StrOutputParser()


def main() -> None:
    question = "Which service failed, and what is the incident number?"
    print(chain.invoke({"log": make_log(), "question": question}))


if __name__ == "__main__":
    main()
