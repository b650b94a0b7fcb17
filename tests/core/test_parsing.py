from rlm_adapters.core.parsing import clean_answer, final_text, find_code_blocks, find_final_in_text


def test_runnable_blocks_are_repl_python_or_untagged_in_order() -> None:
    reply = 'a\n```repl\nx = 1\n```\nb\n```python\ny = 2\n```\n```json\n{"no": 1}\n```\n```\nz = 3\n```\n'
    assert find_code_blocks(reply) == ["x = 1\n", "y = 2\n", "z = 3\n"]


def test_reply_without_fences_has_no_blocks() -> None:
    assert find_code_blocks("I think the answer is 4.") == []


def test_final_in_text_allows_nested_parentheses() -> None:
    final = find_final_in_text("Done.\nFINAL(the count is (approximately) 42 (exact))")
    assert final is not None and final.kind == "FINAL"
    assert final.argument == "the count is (approximately) 42 (exact)"


def test_final_var_in_text_and_final_inside_code_is_not_text() -> None:
    assert find_final_in_text("```repl\nFINAL(x)\n```") is None
    final = find_final_in_text("ok\nFINAL_VAR(answer)")
    assert final is not None and (final.kind, final.argument) == ("FINAL_VAR", "answer")


def test_final_must_start_a_line() -> None:
    assert find_final_in_text("I will call FINAL(x) later") is None
    assert find_final_in_text("**FINAL(yes)**") is not None


def test_parentheses_inside_quotes_do_not_close_final() -> None:
    final = find_final_in_text('FINAL("a ) b")')
    assert final is not None and final_text(final.argument) == "a ) b"


def test_final_text_unquotes_literals_only() -> None:
    assert final_text("'Paris'") == "Paris"
    assert final_text("Paris, France") == "Paris, France"


def test_clean_answer_strips_fences_and_final_wrapper() -> None:
    assert clean_answer("FINAL(42)") == "42"
    assert clean_answer("```\n42\n```") == "42"
