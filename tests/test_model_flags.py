import pytest

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.model_flags import model_options


def test_flags_win_over_environment() -> None:
    options = model_options(model="flag-model", environ={"RLM_MODEL": "env-model", "OPENAI_BASE_URL": "http://h/v1"})
    assert options["backend_kwargs"] == {"model_name": "flag-model", "base_url": "http://h/v1"}
    assert "other_backends" not in options


def test_sub_model_from_environment_shares_the_endpoint() -> None:
    options = model_options(environ={"RLM_MODEL": "big", "RLM_SUB_MODEL": "small", "OPENAI_BASE_URL": "http://h/v1"})
    assert options["other_backends"] == ["openai"]
    assert options["other_backend_kwargs"] == [{"model_name": "small", "base_url": "http://h/v1"}]


def test_anthropic_backend_ignores_the_openai_url() -> None:
    options = model_options(
        environ={"RLM_MODEL": "claude-haiku-4-5", "RLM_BACKEND": "anthropic", "OPENAI_BASE_URL": "x"}
    )
    assert options == {"backend": "anthropic", "backend_kwargs": {"model_name": "claude-haiku-4-5"}}


def test_no_model_names_the_variables() -> None:
    with pytest.raises(ConfigurationError, match="RLM_MODEL"):
        model_options(environ={})
