"""What treatment a served turn received: HyDE counts as received only where it shaped a search's results.

An arm assigned HyDE may still get plain search (a generation timed out, no usable hypothesis, the cascade
skipped it); the A/B report's secondary view and its fallback lines read these helpers.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from .events import TurnRecord
from ..plugin.monitor import RetrievalRecord

__all__ = ("TREATMENT", "CONTROL", "received_treatment", "why_not_used", "hyde_searches")

TREATMENT, CONTROL = "hyde", "raw"


def received_treatment(turn: TurnRecord, retrievals: dict[str, list[RetrievalRecord]]) -> str:
    """``hyde`` when HyDE shaped the results of one of the turn's searches (``used_hyde``); a search where HyDE
    was attempted but fell back (a timeout, no usable hypothesis) gave the raw treatment."""
    recs = retrievals.get(turn.turn_id, ())
    if not recs:
        return "no search"
    return TREATMENT if any(r.used_hyde for r in recs) else CONTROL


def why_not_used(record: RetrievalRecord) -> str:
    """Why HyDE did not shape a search that attempted it: the fallback reason, the cascade's skip, or an error."""
    return record.fallback_reason or (f"skipped: {record.skipped}" if record.skipped else None) \
        or ("error" if record.error else "not used")


def hyde_searches(turns: Sequence[TurnRecord], retrievals: dict[str, list[RetrievalRecord]]) -> dict[str, Any]:
    """What became of HyDE in these turns' searches: how many attempted it, how many it shaped, and why the
    others fell back (``fallback_reason``, or the cascade's skip), most frequent first."""
    recs = [r for t in turns for r in retrievals.get(t.turn_id, ())]
    attempted = [r for r in recs if r.use_hyde]
    fell_back = Counter(why_not_used(r) for r in attempted if not r.used_hyde)
    return {"searches": len(recs), "hyde_attempted": len(attempted),
            "hyde_used": sum(1 for r in attempted if r.used_hyde), "fell_back": sum(fell_back.values()),
            "fallback_reasons": dict(fell_back.most_common())}
