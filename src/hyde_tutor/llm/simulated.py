"""A simulated LLM for benchmarks and fault drills: fixed delay, optional failures.

Benchmark-only (``hyde-tutor bench --llm-latency-ms``): it isolates pipeline overhead from model
speed. Never used on a default path.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import Any


def simulated_hypothesis(prompt: str) -> str:
    """A grammar-entry-shaped passage that varies with the prompt (so hypotheses differ)."""
    h = int(hashlib.md5(prompt.encode("utf-8")).hexdigest()[:8], 16)
    patterns = ["-고 싶다", "-(으)ㄹ 수 있다", "-아서/어서", "-지만", "-(으)면", "-기 때문에", "-는데", "-(으)려고"]
    pattern = patterns[h % len(patterns)]
    return (
        f"Конструкция: {pattern}\nНазвание: пример {h % 97}\nОбъяснение: присоединяется к основе глагола; "
        f"выражает значение, о котором спрашивает ученик. Пример: 가고 싶어요. — Хочу пойти. "
        f"Пример: 먹을 수 있어요. — Могу съесть. Вариант {h % 1000}."
    )


def simulated_model(latency_ms: float, fail_rate: float = 0.0, hang_rate: float = 0.0, seed: int = 0) -> Any:
    """A pydantic-ai model that answers after ``latency_ms``; fails / hangs with the given probabilities."""
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    rng = random.Random(seed)

    async def respond(messages: list[Any], info: Any) -> ModelResponse:
        roll = rng.random()
        if roll < hang_rate:
            await asyncio.sleep(3600)
        await asyncio.sleep(latency_ms / 1000)
        if roll < hang_rate + fail_rate:
            raise ConnectionError("simulated LLM failure")
        prompt = str(messages[-1].parts[-1].content) if messages and messages[-1].parts else ""
        return ModelResponse(parts=[TextPart(simulated_hypothesis(prompt))])

    return FunctionModel(respond, model_name=f"simulated-{latency_ms:.0f}ms")
