"""rlm_adapters.langchain's public surface is one deliberate list."""

from rlm_adapters import langchain

EXPECTED = {"PROGRESS_EVENT", "ChatRLM", "RLMTool", "RLMToolInput", "conversation_to_context", "event_payload"}


def test_all_is_pinned() -> None:
    assert set(langchain.__all__) == EXPECTED
    for name in EXPECTED:
        assert hasattr(langchain, name)
