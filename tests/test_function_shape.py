"""No function outside ``cli/`` takes more than 8 parameters: a wider call takes one value instead
(``SearchRequest``, ``IngestRequest``, ``HypothesisPrompts``, ``SimulatedLLM``), so adding an option does
not mean editing every caller. Counted by ``scripts/function_sizes.py``."""

from __future__ import annotations

from .conftest import ROOT, load_script

MAX_PARAMETERS = 8


def _function_sizes():
    return load_script("function_sizes")


def test_no_function_outside_the_cli_takes_more_than_8_parameters() -> None:
    found = _function_sizes().functions(ROOT / "src" / "hyde_tutor")
    assert len(found) > 100  # the walk saw the package
    wide = sorted((params, name) for _, params, name in found if params > MAX_PARAMETERS)
    assert not wide, f"take one value instead of {MAX_PARAMETERS}+ parameters: {wide}"
