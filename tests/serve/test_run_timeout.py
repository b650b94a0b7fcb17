"""`rlm serve` names the run's wall clock as every interface does: ``run_timeout`` (``timeout`` its older name)."""

from __future__ import annotations

import argparse

import pytest

from rlm_adapters.cli.serve import add_parser
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.serve.served_models import Ceilings, parse_model


def test_a_model_value_sets_the_runs_wall_clock_by_either_name_not_both() -> None:
    ceilings = Ceilings(timeout=100)
    assert parse_model("m=root,run_timeout=30", ceilings).run_limits(ceilings)["run_timeout"] == 30
    assert parse_model("m=root,timeout=40", ceilings).run_limits(ceilings)["run_timeout"] == 40
    with pytest.raises(ConfigurationError, match="run_timeout is given twice"):
        parse_model("m=root,run_timeout=30,timeout=40", ceilings)
    with pytest.raises(ConfigurationError, match=r"above the server's ceiling 100 \(raise it with --max-run-timeout\)"):
        parse_model("m=root,run_timeout=300", ceilings)


@pytest.mark.parametrize("flag", ["--max-run-timeout", "--max-timeout"])
def test_the_ceiling_flag_has_the_same_name_and_its_older_one(flag: str) -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    assert parser.parse_args(["serve", flag, "42"]).ceiling_timeout == 42.0
