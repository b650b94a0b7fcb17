from __future__ import annotations

import openai

from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import Served


def test_smoke(served: Served, upstream: FakeOpenAIServer) -> None:
    client = openai.OpenAI(base_url=served.base_url, api_key="anything", max_retries=0)
    reply = client.chat.completions.create(model="test", messages=[{"role": "user", "content": "How long?"}])
    print(reply)
    assert reply.choices[0].message.content == "42"
