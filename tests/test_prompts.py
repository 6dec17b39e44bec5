from pathlib import Path

import pytest

from hyde_tutor.errors import HydeTutorError
from hyde_tutor.llm.prompts import load_prompt, parse_perspectives, prompt_versions, save_prompt


def test_bundled_prompts_load() -> None:
    request = load_prompt("hypothesis_request").text
    assert "{query}" in request and "{perspective}" in request
    for name in ("hypothesis_grammar", "hypothesis_docs", "perspectives", "hypothesis_request", "tutor"):
        p = load_prompt(name)
        assert p.text and p.ref.startswith(f"{name}@v")
    perspectives = parse_perspectives(load_prompt("perspectives").text)
    assert len(perspectives) == 8
    assert len({p.name for p in perspectives}) == 8 and all(p.instruction for p in perspectives)


def test_save_creates_next_version_and_load_picks_latest(tmp_path: Path) -> None:
    save_prompt("variant", "first", tmp_path)
    second = save_prompt("variant", "second", tmp_path)
    assert second.version == 2 and prompt_versions("variant", tmp_path) == [1, 2]
    assert load_prompt("variant", directory=tmp_path).text == "second"
    assert load_prompt("variant", version=1, directory=tmp_path).text == "first"
    with pytest.raises(HydeTutorError, match="not found"):
        load_prompt("variant", version=9, directory=tmp_path)
    with pytest.raises(HydeTutorError, match="No prompt"):
        load_prompt("missing", directory=tmp_path)
    with pytest.raises(HydeTutorError):
        save_prompt("Bad Name", "x", tmp_path)


def test_prompts_are_found_where_a_wheel_installs_them(tmp_path, monkeypatch) -> None:
    """A wheel ships prompts/ under <prefix>/share/hyde-tutor/prompts (pyproject data-files)."""
    import sys
    from pathlib import Path

    import hyde_tutor.llm.prompts as prompts_module

    installed = tmp_path / "prefix" / "share" / "hyde-tutor" / "prompts"
    installed.mkdir(parents=True)
    (installed / "tutor.v1.md").write_text("installed tutor", encoding="utf-8")
    monkeypatch.delenv("HYDE_PROMPTS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./prompts here
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "prefix"))
    fake_module = tmp_path / "site-packages" / "hyde_tutor" / "prompts.py"  # no checkout around it
    monkeypatch.setattr(prompts_module, "__file__", str(fake_module))
    assert prompts_module.default_prompts_dir() == installed
    assert prompts_module.load_prompt("tutor").text.strip() == "installed tutor"
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"share/hyde-tutor/prompts" = ["prompts/*.md"]' in pyproject
