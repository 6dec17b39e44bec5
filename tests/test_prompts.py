from pathlib import Path

import pytest

from hyde_tutor.errors import HydeTutorError
from hyde_tutor.prompts import load_prompt, parse_perspectives, prompt_versions, save_prompt


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
