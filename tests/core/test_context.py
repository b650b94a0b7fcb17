import pytest

from rlm_adapters.core.context import RunContext, describe_context, validate_context, write_context_file
from rlm_adapters.errors import ContextError


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ("", "empty string"),
        ("   \n", "empty string"),
        ([], "empty list"),
        ({}, "empty dict"),
        (b"data", "decode it to str first"),
        (["ok", object()], r"context\[1\] is a object, not text"),
        (42, "pass a str, a list"),
        ([{"text": {1, 2}}], "cannot be handed to the sandbox as JSON"),
    ],
)
def test_bad_context_gets_a_clear_error(context: object, message: str) -> None:
    with pytest.raises(ContextError, match=message):
        validate_context(context)


def test_description_of_a_document_list_has_counts_and_spread() -> None:
    docs = [{"id": str(i), "text": "x" * (i + 1) * 10, "metadata": {}} for i in range(5)]
    description = describe_context(docs)
    assert description["items"] == 5
    assert description["item_chars"]["min"] < description["item_chars"]["max"]
    assert description["item_keys"] == ["id", "metadata", "text"]


def test_description_preview_is_short(tmp_path: object) -> None:
    description = describe_context("a" * 1_000_000)
    assert description["total_chars"] == 1_000_000
    assert len(description["preview"]) <= 400


def test_context_file_round_trips_text_and_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = "héllo\n" * 300_000
    assert write_context_file(text, tmp_path).read_text(encoding="utf-8") == text
    path = write_context_file({"a": [1, "ü"]}, tmp_path)
    assert path.name == "context.json" and path.read_text(encoding="utf-8") == '{"a": [1, "ü"]}'


def test_a_context_is_prepared_once_into_a_frozen_run_context(tmp_path) -> None:  # type: ignore[no-untyped-def]
    prepared = validate_context(({"text": "abc"}, "de"))
    assert isinstance(prepared, RunContext) and prepared.format == "json"
    assert prepared.value == [{"text": "abc"}, "de"] and prepared.size == 9  # "text" key + "abc" + "de"
    assert prepared.description["type"] == "list" and prepared.description["total_chars"] == 9
    assert validate_context(prepared) is prepared  # already prepared: never walked again
    with pytest.raises(AttributeError):
        prepared.size = 0  # type: ignore[misc]
    data = {"k": "v" * 1000}
    described = validate_context(data).description
    assert described["preview"] == '{"k": "' + "v" * 393 and described["key_count"] == 1
    text = validate_context("line\nline")
    assert (text.format, text.size, text.description["lines"]) == ("text", 9, 2)
    assert write_context_file(text, tmp_path).read_text(encoding="utf-8") == "line\nline"
