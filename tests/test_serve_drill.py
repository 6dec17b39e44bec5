"""scripts/serve_drill.py: a profiled drill asked for without the profiler stops at once with what to install."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import load_script


def test_a_profiled_drill_without_py_spy_stops_before_starting_a_server(tmp_path: Path, monkeypatch, capsys) -> None:
    """It used to start the server, wait for it, and then fail with a FileNotFoundError traceback from Popen
    (py-spy is in the ``profile`` extra, not ``test``: scripts/serve_profile.sh on a fresh venv)."""
    drill = load_script("serve_drill")
    monkeypatch.setattr(drill, "PY_SPY", tmp_path / "no-py-spy")
    monkeypatch.setattr(drill, "drill", lambda *a: pytest.fail("the drill started"))
    with pytest.raises(SystemExit) as stopped:
        drill.main(["--py-spy", str(tmp_path / "profile.txt")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--py-spy needs py-spy" in err and "pip install -e '.[profile]'" in err and str(tmp_path) in err
