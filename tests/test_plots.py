"""Eval charts: plots.plot_eval and ``hyde-tutor eval --plot``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyde_tutor.cli import app
from hyde_tutor.errors import HydeTutorError
from hyde_tutor.evaluation.beir import ArmResult
from hyde_tutor.evaluation.plots import eval_figure, plot_eval

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
runner = CliRunner()


def _metrics(ndcg: float, recall: float) -> dict[str, float]:
    return {"ndcg@10": ndcg, "recall@5": recall, "mrr@10": ndcg}


REPORT = {
    "arms": {"raw": _metrics(0.9, 0.8), "hyde": _metrics(0.7, 0.75), "sparse": _metrics(0.85, 0.9)},
    "groups": {
        arm: {"named": _metrics(0.95, 1.0), "unnamed": _metrics(0.5, 0.5)} for arm in ("raw", "hyde", "sparse")
    },
    "n_queries": 4,
}


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC and head[12:16] == b"IHDR"
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def _bars(ax) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    """Bar heights per query group (each bar carries its group as gid), in x order."""
    out: dict[str, list[tuple[float, float]]] = {}
    for patch in ax.patches:
        out.setdefault(patch.get_gid(), []).append((patch.get_x(), patch.get_height()))
    return {g: [h for _, h in sorted(v)] for g, v in out.items()}


def test_plot_eval_writes_a_png_with_one_bar_group_per_arm(tmp_path: Path) -> None:
    out = plot_eval(REPORT, tmp_path / "sub" / "eval.png", title="grammar", group_counts={"named": 2, "unnamed": 2})
    assert out == tmp_path / "sub" / "eval.png" and out.is_file()
    width, height = _png_size(out)
    assert width >= 600 and height >= 300 and out.stat().st_size > 10_000

    fig = eval_figure(REPORT)
    assert [ax.get_title() for ax in fig.axes] == ["ndcg@10", "recall@5"]
    for ax, metric in zip(fig.axes, ("ndcg@10", "recall@5"), strict=True):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["raw", "hyde", "sparse"]  # one group per arm
        bars = _bars(ax)
        assert set(bars) == {"all", "named", "unnamed"}  # overall + one bar per query group, in each arm's group
        assert bars["all"] == [REPORT["arms"][a][metric] for a in ("raw", "hyde", "sparse")]
        assert bars["unnamed"] == [0.5, 0.5, 0.5]


def test_plot_eval_takes_evaluate_arms_results_too(tmp_path: Path) -> None:
    results = {
        "raw": ArmResult(_metrics(0.9, 0.8), {"named": _metrics(1.0, 1.0), "unnamed": _metrics(0.8, 0.6)}, 1.0),
        "dense": ArmResult(_metrics(0.6, 0.5), {"named": _metrics(0.7, 0.5), "unnamed": _metrics(0.5, 0.5)}, 1.0),
    }
    fig = eval_figure(results)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["raw", "dense"]
    assert _bars(fig.axes[0])["named"] == [1.0, 0.7]
    assert _png_size(plot_eval(results, tmp_path / "r.png"))[0] > 0
    with pytest.raises(HydeTutorError, match="no arms"):
        eval_figure({"arms": {}})
    with pytest.raises(HydeTutorError, match="eval report"):
        eval_figure({"raw": 0.5})
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(HydeTutorError, match="Could not write"):
        plot_eval(results, blocker / "r.png")


def test_cli_eval_plot(isolated_env: Path, tiny_beir: Path) -> None:
    ds = tiny_beir
    png = isolated_env / "charts" / "eval.png"
    out = runner.invoke(app, ["eval", "--collection", "g", "--dataset", str(ds), "--arms", "raw,dense,sparse",
                              "--json", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    assert f"chart: {png}" in out.output
    report = json.loads(out.stdout.strip().splitlines()[-1])  # the JSON stays the last line of stdout
    assert set(report["arms"]) == {"raw", "dense", "sparse"}
    width, _ = _png_size(png)
    assert width >= 600 and png.stat().st_size > 10_000

    text = runner.invoke(app, ["eval", "--collection", "g", "--dataset", str(ds), "--arms", "sparse", "--plot",
                               str(isolated_env / "t.png")])
    assert text.exit_code == 0, text.output
    assert "chart:" in text.output and (isolated_env / "t.png").is_file()
    blocked = runner.invoke(app, ["eval", "--collection", "g", "--dataset", str(ds), "--plot",
                                  str(png / "inside-a-file.png")])
    assert blocked.exit_code == 2 and "Could not write" in blocked.output
