"""What the root model is told: the system prompt, the context description and each turn's feedback."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.engine.parsing import FENCE_RULES

if TYPE_CHECKING:
    from rlm_adapters.core.engine.tool_calls import ToolOffer

SYSTEM_PROMPT = """\
You answer a question about an input that is too long to read directly. The input is not in this \
conversation. It is stored in a Python REPL as the variable `context`, and you work on it by writing code.

Each reply may contain one or more ```repl code blocks ({fences}). They run in order in a persistent \
Python session (variables survive between turns), and you see a truncated copy of what they print. Keep \
long strings in variables instead of printing them: print sizes, samples and short findings.

Functions available in the REPL:
{functions}

How to work:
1. Probe first: print the type and length of `context`, a few samples, and how it is structured.
2. Decide how to split it (by lines, documents, headers, fixed-size chunks), then filter with code \
(regular expressions, keyword search) to find the parts that matter.
3. Send pieces that need understanding to sub-models with `llm_query_batched`, which runs them at the \
same time. A sub-model can read a few hundred thousand characters per call, so make chunks large \
rather than many tiny calls; never send the whole input in one call if it is larger than that.
4. Combine the sub-answers in code or with one more `llm_query`, check the result, then finish.

Example of a good first decomposition:
```repl
print(type(context), len(context))
print(context[:500])
```
then, once you know its shape:
```repl
chunk = 200_000
pieces = [context[i:i + chunk] for i in range(0, len(context), chunk)]
question = "List every user id mentioned in this text with how often it appears, one per line as id: count."
partials = llm_query_batched([f"{{question}}\\n\\nText:\\n{{p}}" for p in pieces])
from collections import Counter
totals = Counter()
for part in partials:
    for line in part.splitlines():
        key, _, value = line.partition(":")
        if value.strip().isdigit():
            totals[key.strip()] += int(value)
answer_text = "\\n".join(f"{{k}}: {{v}}" for k, v in totals.most_common(10))
print(answer_text[:1000])
```
{finish_example}

{finish}{caller_tools}{extra}"""

_FINISH = {
    "FINAL": (
        'Finish with `FINAL(your answer)` for a short answer, or `FINAL_VAR("variable_name")` to return the '
        "value of a REPL variable (use this for long answers). Either may be called in code or written on a "
        "line of its own in your reply; text you quote (`>` lines, fences that do not run, lines repeating the "
        "context) never ends the run. Do not finish before you have looked at the data: answer from what the "
        "code found, not from memory."
    ),
    "answer": (
        'Finish from inside a ```repl block by setting `answer["content"]` to the final answer and then '
        '`answer["ready"] = True`; the run ends after that block and the content is returned. Do not set '
        '`answer["ready"] = True` before you have looked at the data: answer from what the code found, not '
        "from memory."
    ),
}
_FINISH_EXAMPLE = {
    "FINAL": '```repl\nFINAL_VAR("answer")\n```',
    "answer": '```repl\nanswer["content"] = answer_text\nanswer["ready"] = True\n```',
}
_FINISH_HINT = {
    "FINAL": 'finish with FINAL(answer) / FINAL_VAR("name")',
    "answer": 'finish with answer["ready"] = True',
}
# The one rule for failed sub-calls, as the model is told it.
CALL_FAILURE_RULE = (
    "A failed `llm_query`, `llm_query_batched` slot or `rlm_query` does not raise: it returns a string starting "
    'with "Error: " that says why, so check `reply.startswith("Error: ")` where it matters and carry on. '
    "Only a spent budget raises, because the run is over then (a batch it cuts short keeps the answers that "
    'got through; the rest read "Error: budget spent: ...").'
)

_FUNCTIONS = {
    "context": "`context` (also `prompt`): the input ({kind}).",
    "llm_query": "`llm_query(prompt, model=None) -> str`: ask a sub-model one question.{models}",
    "llm_query_batched": (
        "`llm_query_batched(prompts, model=None) -> list[str]`: ask many prompts concurrently; answers come "
        "back in the same order (a failed prompt gives an error string in its slot)."
    ),
    "rlm_query": (
        "`rlm_query(prompt, context=None, model=None) -> str`: hand a sub-problem with its own context to a "
        "nested RLM like you (it gets its own REPL); `rlm_query_batched(prompts, contexts=None, model=None)` "
        "runs several."
    ),
    "rlm_query_plain": (
        "`rlm_query(prompt, context=None, model=None)` / `rlm_query_batched(...)`: the maximum recursion depth is "
        "reached here, so these behave like `llm_query` (context, if given, is appended to the prompt)."
    ),
    "final": (
        "`FINAL(answer)`: end with this answer. `FINAL_VAR(name)`: end with the value of the variable "
        "`name`. `SHOW_VARS()`: list your variables."
    ),
    "answer": (
        '`answer`: a dict, `{{"content": "", "ready": False}}`; set `answer["content"]` and then '
        '`answer["ready"] = True` to submit. `SHOW_VARS()`: list your variables.'
    ),
}


def system_prompt(
    *,
    context_kind: str,
    sub_calls_enabled: bool,
    nested_enabled: bool,
    sub_models: list[str],
    tools: dict[str, str],
    instructions: str | None = None,
    final_protocol: str = "FINAL",
    template: str | None = None,
    values: dict[str, str] | None = None,
    code_fences: str = "any",
    caller_tools: str = "",
) -> str:
    """The root model's system prompt for one run.

    Args:
        context_kind: The type of `context`.
        sub_calls_enabled: False when max_depth=0.
        nested_enabled: True when `rlm_query` starts a nested RLM (not a plain call).
        sub_models: The models `llm_query(model=)` may name.
        tools: Host-side functions, name -> description.
        instructions: Added at the end.
        final_protocol: ``FINAL`` (FINAL / FINAL_VAR) or ``answer`` (the reference's answer dict): what is taught.
        template: A whole replacement prompt (``custom_system_prompt``); ``{custom_tools_section}`` in it is
            filled with the tools, as the reference does.
        values: Plain values given as tools, name -> description.
        code_fences: Which fences run (``any`` or ``repl``), stated in the prompt.
        caller_tools: The section on the caller's tools (`caller_tools_section`), added before the
            instructions (also to a `template`).
    """
    lines = [_FUNCTIONS["context"].format(kind=context_kind)]
    if sub_calls_enabled:
        models = (
            f" Models: {', '.join(repr(m) for m in sub_models)} (first is the default)." if len(sub_models) > 1 else ""
        )
        lines.append(_FUNCTIONS["llm_query"].format(models=models))
        lines.append(_FUNCTIONS["llm_query_batched"])
        lines.append(_FUNCTIONS["rlm_query"] if nested_enabled else _FUNCTIONS["rlm_query_plain"])
    else:
        lines.append(
            "Sub-model calls are disabled for this run (max_depth=0): `llm_query` and `rlm_query` raise an "
            "error. Solve the task with code alone."
        )
    if sub_calls_enabled:
        lines.append(CALL_FAILURE_RULE)
    lines.append(_FUNCTIONS["answer" if final_protocol == "answer" else "final"])
    tool_lines = tool_descriptions(tools, values or {})
    extra = f"\n\nInstructions from the user:\n{instructions}" if instructions else ""
    caller_tools = f"\n\n{caller_tools}" if caller_tools else ""
    if template is not None:
        listing = "\n".join(f"- {line}" for line in tool_lines)
        section = f"\nCustom tools and data in the REPL:\n{listing}" if listing else ""
        try:
            text = template.format(custom_tools_section=section)
        except (KeyError, IndexError, ValueError):  # braces that are not a reference-style template
            text = template
        return text + caller_tools + extra
    protocol = "answer" if final_protocol == "answer" else "FINAL"
    return SYSTEM_PROMPT.format(
        functions="\n".join(f"- {line}" for line in [*lines, *tool_lines]),
        fences=FENCE_RULES.get(code_fences, FENCE_RULES["any"]),
        finish_example=_FINISH_EXAMPLE[protocol],
        finish=_FINISH[protocol],
        caller_tools=caller_tools,
        extra=extra,
    )


def _tool_listing(offer: ToolOffer) -> str:
    return "\n".join(
        f"- `{tool.name}`: {' '.join(tool.description.split()) or '(no description)'} Arguments (JSON schema): "
        f"{json.dumps(tool.parameters, ensure_ascii=False, separators=(',', ':'))}"
        for tool in offer.tools.values()
    )


def _tool_choice(offer: ToolOffer) -> str:
    if offer.forced_tool is not None:
        choice = f"This turn must end with a call of `{offer.forced_tool}`: do not finish with a final answer."
    elif offer.mode == "required":
        choice = "This turn must end with at least one tool call: do not finish with a final answer."
    else:
        choice = "When no tool is needed, finish with a final answer as usual."
    return choice + ("" if offer.parallel else " Call one tool per turn.")


def direct_tools_section(offer: ToolOffer) -> str:
    """The caller's tools as the direct route offers them (one plain call, no REPL): ``CALL_TOOL`` lines."""
    if offer.choice == "none":
        return ""
    example = next(iter(offer.tools))
    return (
        "Tools of the caller. The caller runs them after your reply and sends their results back in its next "
        f"message. Call one when the task needs what only it can give.\n{_tool_listing(offer)}\n"
        f'To call a tool, write a line of its own in your reply: `CALL_TOOL {example} {{"name": value}}` (the '
        "arguments as one JSON object). Each call is checked against its tool's schema; a call that does not fit "
        f"is sent back to you to fix. {_tool_choice(offer).replace('final answer as usual', 'plain answer')}"
    )


def direct_schema_section(schema_text: str) -> str:
    """What the direct route's model is told of a typed answer (`OutputSchema.json_schema`, as JSON text)."""
    return f"Reply with only a JSON value matching this JSON schema (no prose around it):\n```json\n{schema_text}\n```"


def direct_retry(problem: str) -> str:
    """The direct route's message after a reply that did not fit (its typed answer, its tool calls)."""
    return f"Your reply was not accepted: {problem}\nReply again, corrected."


def caller_tools_section(offer: ToolOffer) -> str:
    """What the root model is told about the caller's tools: each one, and how a turn ends with calls."""
    if offer.choice == "none":
        return ""
    listing = _tool_listing(offer)
    example = next(iter(offer.tools))
    choice = _tool_choice(offer)
    return (
        "Tools of the caller. They are not REPL functions: the caller runs them after your turn and sends "
        "their results back in its next message, as new entries of `context`. Call one when the task needs "
        "what only it can give, not for what `context` already holds.\n"
        f"{listing}\n"
        "To call tools, end your turn with the calls, in one of two ways:\n"
        f'- in a ```repl block: `call_tool("{example}", name=value, ...)` (or `call_tool("{example}", '
        "{...})` with a dict). It returns None; several calls may follow each other; the block runs to its "
        "end, then your turn ends (later blocks do not run). Arguments may be built in code, from REPL "
        "variables.\n"
        f'- or on a line of its own in your reply: `CALL_TOOL {example} {{"name": value}}` (the arguments as '
        "one JSON object, which may continue on the next lines).\n"
        "Each call is checked against its tool's schema; a call that does not fit is sent back to you to fix. "
        f"{choice}"
    )


def tool_descriptions(tools: dict[str, str], values: dict[str, str]) -> list[str]:
    """One line per custom tool: functions and plain values, each with its description."""
    lines = [f"`{name}`: {description or 'a host-side function.'}" for name, description in tools.items()]
    lines += [f"`{name}`: {description}" for name, description in values.items()]
    return lines


def context_message(description: dict[str, Any], query: str | None) -> str:
    """The first user message: what the context looks like, and the question."""
    parts = [f"The variable `context` is a {description['type']} of {description['total_chars']:,} characters"]
    if "items" in description:
        spread = description["item_chars"]
        parts[0] += (
            f" in {description['items']:,} items (item length min {spread['min']:,}, median "
            f"{spread['median']:,}, max {spread['max']:,} characters)"
        )
        if "item_keys" in description:
            parts[0] += f"; items are dicts with keys {description['item_keys']}"
    elif "key_count" in description:
        parts[0] += f" with {description['key_count']:,} keys, e.g. {description['keys'][:10]}"
    elif "lines" in description:
        parts[0] += f" on {description['lines']:,} lines"
    parts[0] += "."
    if description.get("preview"):  # none with ``context_preview_chars=0``: the root model sees no raw text
        parts.append(f"Its beginning:\n<preview>\n{description['preview']}\n</preview>")
    if query:
        parts.append(f"The question to answer:\n{query}")
    else:
        parts.append("There is no separate question: the context itself says what to do.")
    parts.append("Start by writing ```repl code to look at the context. Do not answer yet.")
    return "\n\n".join(parts)


def truncate_output(text: str, limit: int, total: int | None = None) -> str:
    """Head and tail of `text` within `limit` characters, saying how much was cut."""
    total = len(text) if total is None else total
    if total <= limit and len(text) <= limit:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit // 3) :] if len(text) > limit else ""
    cut = total - len(head) - len(tail)
    return f"{head}\n... [output truncated: {cut:,} of {total:,} characters not shown] ...\n{tail}"


def cell_feedback(index: int, output: str, error: str | None, notes: list[str]) -> str:
    """What the model sees of one executed block."""
    parts = [f"[block {index} output]", output.rstrip() or "(no output)"]
    if error:
        parts += [f"[block {index} error]", error]
    parts += notes
    return "\n".join(parts)


def turn_feedback(
    blocks: list[str], variables: dict[str, str], iteration: int, max_iterations: int, final_protocol: str = "FINAL"
) -> str:
    """The user message after a turn whose code ran."""
    parts = list(blocks)
    if variables:
        shown = ", ".join(f"{name} ({kind})" for name, kind in list(variables.items())[:30])
        parts.append(f"REPL variables: {shown}")
    remaining = max_iterations - iteration
    parts.append(
        f"Turn {iteration} of {max_iterations} done ({remaining} left). Continue with ```repl code, "
        f"or {_FINISH_HINT.get(final_protocol, _FINISH_HINT['FINAL'])}."
    )
    return "\n\n".join(parts)


QUOTED_FINAL = (
    "A FINAL(...) in your reply was not taken as your answer: it is quoted (a `>` line, a fence, indented "
    "code) or repeats text of the context, and quoted text never ends the run. To finish, write "
    "FINAL(...) in your own words on a line of its own, or call FINAL(...) / FINAL_VAR(...) in a ```repl block."
)


def repeated_turn(count: int) -> str:
    """The line for a model that wrote the same turn `count` times in a row."""
    return (
        f"You have written the same thing {count} turns in a row, and its result will not change. Do something "
        "else: inspect `context` another way, fix the error above, or finish with FINAL(answer)."
    )


def reply_cut(cap: int | None) -> str:
    """The line for a model whose reply was cut at its token cap."""
    where = f"max_reply_tokens={cap:,}" if cap is not None else "the model's own output limit"
    return f"Your reply was cut at its token cap ({where}): what came after it was lost. Write shorter replies."


def sub_replies_cut(count: int, cap: int | None) -> str:
    """The line for a turn in which sub-call replies were cut at their token cap."""
    where = f"max_reply_tokens={cap:,}" if cap is not None else "the model's own output limit"
    replies = "reply was" if count == 1 else "replies were"
    return f"{count} sub-call {replies} cut at the token cap ({where}): ask for shorter answers or smaller pieces."


NO_CODE_NUDGE = (
    "No code ran: your reply had no ```repl block and no FINAL(...). You cannot see the context except "
    "through code. Write a ```repl block to inspect it, or finish with FINAL(answer)."
)


def no_code_nudge(final_protocol: str = "FINAL") -> str:
    """The user message after a reply without code or a final answer."""
    if final_protocol != "answer":
        return NO_CODE_NUDGE
    return (
        "No code ran: your reply had no ```repl block. You cannot see the context except through code. "
        'Write a ```repl block to inspect it, or submit with answer["content"] = ...; answer["ready"] = True.'
    )


def session_note(contexts: int, histories: int, alias: str = "latest") -> str:
    """Tells the root of a persistent session's later run what earlier runs left in the REPL."""
    if contexts <= 1 and histories == 0:
        return ""
    which = "the first" if alias == "first" else "the latest"
    parts = [
        f"This is run {contexts} of a persistent session: {contexts} contexts are loaded "
        f"(context_0 through context_{contexts - 1}; `context` is {which}), and your variables from "
        "earlier runs are still defined."
    ]
    if histories:
        parts.append(
            f"The earlier conversations are in history_0 through history_{histories - 1} (`history` is "
            f"{which}), each a list of {{'role', 'content'}} messages."
        )
    return "Note: " + " ".join(parts)


COMPACTION_REQUEST = (
    "Summarize your progress so far. Include:\n"
    "1. Which steps/sub-tasks you have completed and which remain.\n"
    "2. Any concrete intermediate results (numbers, values, variable names) you computed; preserve these "
    "exactly.\n"
    "3. What your next action should be.\n"
    "Be concise (1-3 paragraphs) but keep every key result and your current position in the task."
)


def compaction_resume(count: int) -> str:
    """The user message after a compaction."""
    return (
        f"Your conversation has been compacted {count} time(s) to fit your context window. Continue from the "
        "summary above; do not repeat finished work. Your REPL variables are all still there: use SHOW_VARS() "
        "to list them. Your next action:"
    )


LAST_CHANCE = (
    "You have used all your turns. Reply now with your best final answer as plain text, without any "
    "code, based on what you found so far."
)


def last_chance(*, tools: bool = False) -> str:
    """The user message once the turns are used up (with the caller's tools, a CALL_TOOL line still works)."""
    if not tools:
        return LAST_CHANCE
    return f"{LAST_CHANCE} If a tool must be called, write its CALL_TOOL line instead."
