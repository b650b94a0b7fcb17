import pytest

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tokens import (
    bundled_cache_dir,
    count_tokens,
    format_length,
    parse_length,
    parse_lengths,
)


def test_bundled_cache_holds_both_encodings_under_tiktokens_cache_names():
    folder = bundled_cache_dir()
    assert folder is not None
    # sha1 of the download URLs of cl100k_base and o200k_base: the names tiktoken looks up in its cache.
    assert (folder / "9b5ad71b2ce5302211f9c61530b329a4922fc6a4").is_file()
    assert (folder / "fb374d419588a4632f3f557e76b4b70aebbca790").is_file()


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_count_tokens_offline_with_real_bpe(encoding):
    assert count_tokens("hello world", encoding) == 2
    assert count_tokens("", encoding) == 0
    assert count_tokens("<|endoftext|>", encoding) > 1  # special-token text counts as plain text


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("8k", 8192),
        ("32k", 32768),
        ("131k", 131072),
        ("1m", 2**20),
        ("4194k", 2**22),
        ("2^13", 8192),
        ("5000", 5000),
        ("10k", 10_000),
        (" 16K ", 16384),
    ],
)
def test_parse_length(text, tokens):
    assert parse_length(text) == tokens


@pytest.mark.parametrize("text", ["", "abc", "512", "0.5k", "k"])
def test_parse_length_rejects_bad_values(text):
    with pytest.raises(ConfigurationError, match="length"):
        parse_length(text)


def test_parse_lengths_keeps_order_and_formats_back():
    lengths = parse_lengths("8k,32k,131k")
    assert lengths == [8192, 32768, 131072]
    assert [format_length(x) for x in lengths] == ["8k", "32k", "131k"]
    assert format_length(2**20) == "1m"
