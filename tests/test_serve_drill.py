"""scripts/serve_drill.py: a profiled drill asked for without the profiler stops at once with what to install."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from .conftest import DATA

SCRIPTS = DATA.parent / "scripts"


def _module():
    sys.path.insert(0, str(SCRIPTS))  # the script imports its sibling drill_http
    try:
        spec = importlib.util.spec_from_file_location("serve_drill", SCRIPTS / "serve_drill.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    finally:
        sys.path.remove(str(SCRIPTS))
    return module


def test_a_profiled_drill_without_py_spy_stops_before_starting_a_server(tmp_path: Path, monkeypatch, capsys) -> None:
    """It used to start the server, wait for it, and then fail with a FileNotFoundError traceback from Popen
    (py-spy is in the ``profile`` extra, not ``test``: scripts/serve_profile.sh on a fresh venv)."""
    drill = _module()
    monkeypatch.setattr(drill, "PY_SPY", tmp_path / "no-py-spy")
    monkeypatch.setattr(drill, "drill", lambda *a: pytest.fail("the drill started"))
    with pytest.raises(SystemExit) as stopped:
        drill.main(["--py-spy", str(tmp_path / "profile.txt")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--py-spy needs py-spy" in err and "pip install -e '.[profile]'" in err and str(tmp_path) in err
