import re

import pytest
from pydantic import ValidationError

from hyde_tutor import Settings

from .conftest import ROOT, setting_keys


def test_env_example_documents_every_setting() -> None:
    text = (ROOT / ".env.example").read_text(encoding="utf-8")
    listed = set(re.findall(r"^#?\s*(HYDE_[A-Z0-9_]+)=", text, flags=re.M))
    assert listed == setting_keys(Settings)


def test_nested_env_and_dotenv(isolated_env, monkeypatch) -> None:
    monkeypatch.setenv("HYDE_QDRANT__URL", "http://qdrant:6333")
    monkeypatch.setenv("HYDE_RETRIEVAL__RRF_K", "42")
    (isolated_env / ".env").write_text("HYDE_DENSE__BATCH_SIZE=7\nHYDE_QDRANT__API_KEY=secret-key\n")
    s = Settings()
    assert s.qdrant.url == "http://qdrant:6333"
    assert s.retrieval.rrf_k == 42 and s.dense.batch_size == 7
    assert "secret-key" not in repr(s) and s.qdrant.api_key.get_secret_value() == "secret-key"
    assert str(s.data_dir).endswith("data-dir")


@pytest.mark.parametrize("where", ["env", "dotenv", "kwarg"])
def test_the_old_llm_key_is_refused_with_the_new_name(isolated_env, monkeypatch, where: str) -> None:
    if where == "env":
        monkeypatch.setenv("HYDE_LLM__API_KEY", "sk-old")
    elif where == "dotenv":
        (isolated_env / ".env").write_text("HYDE_LLM__API_KEY=sk-old\n")
    with pytest.raises(ValidationError, match="HYDE_OPENAI__API_KEY") as info:
        Settings(llm={"api_key": "sk-old"}) if where == "kwarg" else Settings()
    assert "sk-old" not in str(info.value) and "sk-old" not in repr(info.value.errors())  # the key is not echoed


def test_one_openai_key_for_the_llm(isolated_env, monkeypatch) -> None:
    from hyde_tutor.llm.backends import openai_key, resolve_provider

    assert resolve_provider(Settings()) == "local" and openai_key(Settings()) is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert openai_key(Settings()) == "sk-env" and resolve_provider(Settings().llm) == "openai"
    monkeypatch.setenv("HYDE_OPENAI__API_KEY", "sk-one")
    assert openai_key(Settings()) == "sk-one" and resolve_provider(Settings()) == "openai"
