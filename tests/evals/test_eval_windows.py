import pytest

from rlm_adapters.evals.windows import known_window


@pytest.mark.parametrize(
    ("model", "window"),
    [
        ("gpt-5", 272_000),
        ("gpt-5-mini-2025-08-07", 272_000),
        ("openai/gpt-5-nano", 272_000),
        ("gpt-4o-mini", 128_000),
        ("GPT-4.1", 1_047_576),
        ("claude-sonnet-4-5", 200_000),
        ("Qwen/Qwen3-Coder-480B-A35B-Instruct", 262_144),
        ("my-local-llama", None),
        (None, None),
    ],
)
def test_known_windows_match_by_longest_prefix(model, window):
    assert known_window(model) == window
