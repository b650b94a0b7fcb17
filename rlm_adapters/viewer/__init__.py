"""See what an RLM did: its trajectory log as a terminal tree or an HTML page, and export for fine-tuning.

`rlm view` and `rlm export` are in `rlm_adapters.cli.view`; `write_html` is what `rlm ask --html` calls.
"""

from rlm_adapters.viewer.export import ExportOptions, ExportStats, Gold, export
from rlm_adapters.viewer.html import render_html, write_html
from rlm_adapters.viewer.locate import resolve
from rlm_adapters.viewer.log_build import build, load
from rlm_adapters.viewer.log_tree import Trajectory
from rlm_adapters.viewer.terminal import follow, render, show

__all__ = [
    "ExportOptions",
    "ExportStats",
    "Gold",
    "Trajectory",
    "build",
    "export",
    "follow",
    "load",
    "render",
    "render_html",
    "resolve",
    "show",
    "write_html",
]
