"""rlm_query checks the answer's claims (issue 26): the structured `claims`, and the text's Unsupported: line."""

from __future__ import annotations

import json
from pathlib import Path

from mcp import Client

from rlm_adapters.core.trajectory import SOURCES_RECORD, read_trajectory
from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from tests import planted
from tests.mcp_server.conftest import MakeConfig


async def test_a_made_up_number_and_one_no_model_read_are_flagged(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, workspace: Path, tmp_path: Path
) -> None:
    tree = planted.make_tree(workspace / "repo")
    fake_server.root = planted.root(fabricated=True)
    async with Client(build_server(make_config(roots=[tree]))) as client:
        lean = await client.call_tool("rlm_query", {"query": "What are the rollout passwords?", "paths": ["src"]})
        result = await client.call_tool(
            "rlm_query", {"query": "What are the rollout passwords?", "paths": ["src"], "detail": "full"}
        )
    assert not result.is_error and result.structured_content is not None
    # The lean result names what is unsupported in short, and leaves the claims in full to detail="full".
    assert lean.structured_content is not None and "detail" not in lean.structured_content
    short = lean.structured_content["unsupported"]
    # The made-up number is left to its sentence, the common reason unsaid; the unread one says where it is.
    sentence = planted.FABRICATED_TEXT[len(planted.ANSWER_TEXT) + 1 :]
    assert short[0] == sentence and planted.FABRICATED_NUMBER not in short
    assert short[1:] == [
        f"{planted.UNREAD_NUMBER} (in the input ({planted.unread_location()}) but in no text that reached a model)"
    ]
    content = result.structured_content["detail"]
    assert result.structured_content["answer"] == planted.FABRICATED_TEXT
    planted.check_flags(content["claims"])
    supported = {c["text"]: c["source"] for c in content["claims"] if c["status"] == "supported"}
    assert (supported["ZEBRA-4821"]["path"], supported["ZEBRA-4821"]["line_start"]) == ("src/pkg_007/mod_007.txt", 12)
    text = result.content[0].text  # type: ignore[union-attr]
    unsupported = text.splitlines()[-1]
    assert unsupported.startswith("Unsupported: ")
    assert f'"{planted.FABRICATED_NUMBER}" (in no text that reached a model)' in unsupported
    assert f'"{planted.UNREAD_NUMBER}" (in the input ({planted.unread_location()})' in unsupported
    # The run's trajectory carries the same findings, after its last event.
    [log] = (tmp_path / "logs").glob(f"*_{result.structured_content['trajectory_id'][:8]}.jsonl")
    _, records = read_trajectory(log)
    assert records[-1]["type"] == SOURCES_RECORD and records[-2]["kind"] == "final"
    assert json.dumps(records[-1]["claims"]) == json.dumps(content["claims"])


async def test_the_schema_describes_claims(make_config: MakeConfig) -> None:
    async with Client(build_server(make_config())) as client:
        [tool] = (await client.list_tools()).tools
    assert tool.output_schema is not None
    assert "unsupported" in tool.output_schema["properties"]
    properties = tool.output_schema["$defs"]["RLMQueryDetail"]["properties"]
    assert "claims" in properties and "sources_note" in properties
    claim = tool.output_schema["$defs"]["ClaimChecked"]["properties"]
    assert claim["status"]["enum"] == ["supported", "unsupported"]
