"""The HTML page as text: self-contained, data escaped against `</script>`, one bar per timeline item."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlm_adapters.core.trajectory import read_trajectory
from rlm_adapters.viewer.html import embed_json, payload, write_html
from rlm_adapters.viewer.log_build import build, load

HOSTILE = "</script><script>window.pwned=1</script><!-- \u2028 & </SCRIPT >"


def test_embedded_json_cannot_close_the_script_element() -> None:
    text = embed_json({"prompt": HOSTILE})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"prompt": HOSTILE}


def test_page_is_self_contained_and_carries_the_run(recorded_log: Path, tmp_path: Path) -> None:
    out = write_html(recorded_log, tmp_path / "sub" / "page.html")
    page = out.read_text(encoding="utf-8")
    assert out.parent.name == "sub"
    assert not re.search(r"""(src|href)\s*=|@import|url\(|https?://""", page)
    assert "default-src 'none'" in page  # the browser itself refuses any fetch
    found = re.search(r'<script type="application/json" id="rlm-data">(.*?)</script>', page, re.S)
    assert found is not None
    data = json.loads(found[1])
    assert data["runs"][0]["response"] == "42" and data["runs"][1]["parent"] == 0
    assert len(data["turns"]) == 5 and len(data["cells"]) == 4 and len(data["batches"]) == 2
    assert len(data["calls"]) == 5


def test_hostile_text_in_the_log_stays_data(recorded_log: Path, tmp_path: Path) -> None:
    header, events = read_trajectory(recorded_log)
    for event in events:
        if event["kind"] == "sub_call_start":
            event["prompt"] = HOSTILE
    page_data = payload(build(header, events))
    assert page_data["calls"][0]["prompt"] == HOSTILE
    out = tmp_path / "hostile.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in [header, *events]) + "\n", encoding="utf-8")
    page = write_html(out, tmp_path / "hostile.html").read_text(encoding="utf-8")
    # Only the page's own two script elements close; the hostile text never appears raw.
    assert page.lower().count("</script") == 2 and "window.pwned" in page and "<script>window.pwned" not in page


def test_live_log_renders(recorded_log: Path, tmp_path: Path) -> None:
    lines = recorded_log.read_text(encoding="utf-8").splitlines(keepends=True)
    live = tmp_path / "live.jsonl"
    live.write_text("".join(lines[:9]), encoding="utf-8")
    assert not load(live).finished
    page = write_html(live, tmp_path / "live.html").read_text(encoding="utf-8")
    assert '"finished":false' in page
