"""A follow-up's conversation searches ranked by a small learned model: the offline path (issue 39).

A follow-up read without a model is searched three ways (:func:`~hyde_tutor.hyde.conversation.conversation_queries`:
the message alone, after the tutor's last reply, after the whole previous exchange). Their RRF fusion alone
cannot tell when the message's own words should win («А как сказать "устал"?» names its topic) from when the
conversation should («А если это не я хочу, а мама?» does not); neither can it see which candidate is the entry
the tutor just taught. A conditional-logit model over a few features of each candidate decides:

* where it ranks in each search, and how close its score is to that search's top;
* where the RRF fusion put it (the fusion is the model's strongest input, so the model starts from it);
* whether the tutor's reply names it (its notation, read as the named lead reads a hypothesis);
* for the message's own top entry: how many new content words the message has, whether it has Korean or a quoted
  phrase, how far its top leads its second, whether the search after the reply leaves it out of its top 5.

The weights are learned by ``scripts/train_conversation_ranker.py`` on the dev pool (the tuning half of the
conversation sets and the outside sets fresh…fresh11), never on the held-out half or a set reported as unseen;
the file it writes, ``conversation_ranker.json`` beside this module, says what it was trained on. A message read
as a new question is never ranked here: it is searched alone, as before.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..retrieval.store import Hit
from .conversation import MESSAGE_TOP_WITHIN, REPLY_CHARS, content_words, last_said, opens_like_followup

__all__ = ["FEATURES", "ConversationRanker", "FollowUp", "default_ranker", "feature_matrix", "follow_up_for", "rank_hits",
           "ranked_depth", "taught_entries"]

FEATURES: tuple[str, ...] = (
    "msg_rr", "msg_score", "reply_rr", "reply_score", "exchange_rr", "exchange_score", "fused_top", "fused_rr",
    "msg_rr_x_words", "msg_rr_x_opener", "reply_rr_x_words", "taught", "taught_x_words",
    "msg_top_x_new_words", "msg_top_x_korean", "msg_top_x_margin", "msg_top_x_quoted", "msg_top_x_not_in_reply_top5",
)
"""The model's inputs per candidate, in the order of its weights (``*_rr``: 1 / (1 + rank) in that search, 0 when
absent; ``*_score``: the candidate's score over the search's top score; ``*_x_words``: times the message's content
words, capped at 6, over 6; ``msg_top_x_*``: only for the message's own top entry)."""

DEPTH = 10
"""Candidates: the union of each search's top ``DEPTH``."""
SEARCH_DEPTH = 30
"""How deep each of the three searches reads (as in training, ``scripts/conversation_split.py``): a candidate's rank
and score in another search count down to here."""
_log = logging.getLogger("hyde_tutor")

_NAME = re.compile(r"(?<![가-힣])-[\s(]*[가-힣ㄱ-ㅎ][가-힣ㄱ-ㅎ()/ ]*")
_KOREAN = re.compile(r"[가-힣]")
_QUOTE = re.compile(r"[«\"„]")
_PATH = Path(__file__).with_name("conversation_ranker.json")

Ranking = Sequence[tuple[str, float]]
"""One search's ``(doc id, score)`` pairs, best first."""


@dataclass(frozen=True, slots=True)
class FollowUp:
    """What the ranker reads of the conversation besides the searches."""

    message: str
    """The learner's message (read as a follow-up)."""
    reply: str
    """The tutor's last reply (the first :data:`~hyde_tutor.hyde.conversation.REPLY_CHARS` characters searched)."""
    previous: str = ""
    """The learner's previous question."""

    @classmethod
    def from_history(cls, history: Sequence[tuple[str, str]], message: str) -> FollowUp:
        """The follow-up ``message`` after ``history`` (``(role, content)`` pairs)."""
        return cls(message.strip(), last_said(history, "assistant")[:REPLY_CHARS], last_said(history, "user"))


def taught_entries(reply: str, notations: Mapping[str, str]) -> frozenset[str]:
    """The candidates whose notation the reply names best («Желание передаётся через -고 싶다: …» names the
    entry noted ``-고 싶다``); empty when the reply names no construction («-…») or none of these."""
    from .named import name_strength

    names = [m.group(0).strip().rstrip("/ ") for m in _NAME.finditer(reply)]
    if not names:
        return frozenset()
    strengths = {doc_id: name_strength(names, notation) for doc_id, notation in notations.items() if notation}
    best = max((s for s in strengths.values() if any(s)), default=None)
    return frozenset(d for d, s in strengths.items() if best is not None and s == best)


def feature_matrix(follow_up: FollowUp, searches: Sequence[Ranking], fused: Sequence[str],
                   notations: Mapping[str, str]) -> tuple[list[str], np.ndarray]:
    """The candidates (each search's top :data:`DEPTH`, in order of appearance) and their :data:`FEATURES`.

    ``searches``: the message alone, after the reply, after the exchange (as ``conversation_queries`` orders
    them); ``fused``: their RRF fusion's ids; ``notations``: each candidate's notation (its ``pattern``)."""
    if len(searches) != 3:
        raise ValueError(f"the ranker reads three searches (message, reply, exchange), got {len(searches)}")
    candidates = list(dict.fromkeys(d for ranking in searches for d, _ in ranking[:DEPTH]))
    own = content_words(follow_up.message)
    words = min(len(own), 6) / 6
    opener = float(opens_like_followup(follow_up.message))
    before = f"{follow_up.previous} {follow_up.reply}".lower()
    new_words = min(sum(1 for w in own if w[:5] not in before), 4) / 4
    korean = float(bool(_KOREAN.search(follow_up.message)))
    quoted = float(bool(_QUOTE.search(follow_up.message)))
    msg = searches[0]
    margin = (min(1.0, (msg[0][1] - msg[1][1]) / max(1e-6, msg[0][1]) * 5) if len(msg) > 1
              else 1.0 if msg else 0.0)
    msg_top = msg[0][0] if msg else None
    outside = float(msg_top not in [d for d, _ in searches[1][:5]])
    taught = taught_entries(follow_up.reply, {d: notations.get(d, "") for d in candidates})
    ranks = [{d: (i, s) for i, (d, s) in enumerate(ranking)} for ranking in searches]
    tops = [ranking[0][1] if ranking else 1.0 for ranking in searches]
    fused_at = {d: i for i, d in enumerate(fused)}
    rows = []
    for d in candidates:
        row: list[float] = []
        for at, top in zip(ranks, tops, strict=True):
            i, s = at.get(d, (None, 0.0))
            row += [0.0, 0.0] if i is None else [1.0 / (1 + i), s / max(1e-6, top)]
        row += [float(bool(fused) and fused[0] == d), 1.0 / (1 + fused_at[d]) if d in fused_at else 0.0]
        row += [row[0] * words, row[0] * opener, row[2] * words]
        is_taught, is_top = float(d in taught), float(d == msg_top)
        row += [is_taught, is_taught * words]
        row += [is_top * new_words, is_top * korean, is_top * margin, is_top * quoted, is_top * outside]
        rows.append(row)
    return candidates, np.array(rows, dtype=float).reshape(len(rows), len(FEATURES))


@dataclass(frozen=True, slots=True)
class ConversationRanker:
    """A conditional-logit model over :data:`FEATURES`: each candidate's score is the weighted sum of its
    features; the ranking is by score (ties keep the candidates' order)."""

    weights: tuple[float, ...]
    features: tuple[str, ...] = FEATURES
    trained_on: str = ""
    """What the weights were learned on (the training script's note)."""

    def __post_init__(self) -> None:
        if self.features != FEATURES:
            raise ValueError("the ranker's weights were learned for other features: "
                             f"{list(self.features)} (this code reads {list(FEATURES)}); retrain with "
                             "scripts/train_conversation_ranker.py")
        if len(self.weights) != len(FEATURES) or not all(math.isfinite(w) for w in self.weights):
            raise ValueError(f"the ranker needs {len(FEATURES)} finite weights, got {list(self.weights)}")

    @classmethod
    def load(cls, path: str | Path) -> ConversationRanker:
        """The ranker a training run wrote (``{"features": [...], "weights": [...], "trained_on": "..."}``)."""
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not {"features", "weights"} <= data.keys():
            raise ValueError(f"{path} is not a ranker file (it needs \"features\" and \"weights\"); write one with "
                             "scripts/train_conversation_ranker.py")
        return cls(tuple(float(w) for w in data["weights"]), tuple(data["features"]), str(data.get("trained_on", "")))

    def rank(self, follow_up: FollowUp, searches: Sequence[Ranking], fused: Sequence[str],
             notations: Mapping[str, str]) -> list[tuple[str, float]]:
        """The candidates of ``searches`` as one ranking of ``(doc id, probability)``, best first (the model's
        softmax over the candidates: positive, and non-increasing down the ranking, so a relative threshold reads
        it as it reads a store's scores); the message's own top entry kept within
        :data:`~hyde_tutor.hyde.conversation.MESSAGE_TOP_WITHIN` (as in the RRF fusion: «А в прошедшем времени?»
        shows -았/었- beside the entry taught; moved up, it takes the score of the entry it passes); the fused
        ranking's entries beyond the candidates follow in their order (score 0)."""
        candidates, x = feature_matrix(follow_up, searches, fused, notations)
        if not candidates:
            return []
        logits = x @ np.asarray(self.weights)
        probabilities = np.exp(logits - logits.max())
        probabilities /= probabilities.sum()
        order = np.argsort(-logits, kind="stable")
        ranked = [(candidates[i], float(probabilities[i])) for i in order]
        own = [i for i, (d, _) in enumerate(ranked) if searches[0] and d == searches[0][0][0]]
        if own and own[0] >= MESSAGE_TOP_WITHIN:
            doc_id, _ = ranked.pop(own[0])
            ranked.insert(MESSAGE_TOP_WITHIN - 1, (doc_id, ranked[MESSAGE_TOP_WITHIN - 1][1]))
        seen = set(candidates)
        return ranked + [(d, 0.0) for d in fused if d not in seen]


def rank_hits(follow_up: FollowUp, searches: Sequence[Sequence[Hit]], fused: Sequence[str],
              name_field: str | None, ranker: ConversationRanker | None = None) -> list[tuple[str, float]] | None:
    """:meth:`ConversationRanker.rank` of the store's hits (an entry's notation: its payload's ``name_field``, else
    a BEIR export's title, as the named lead reads it), by ``ranker`` or the :func:`default_ranker`; None when
    there is no ranker to use (the shipped file could not be read)."""
    from .named import notation_of

    ranker = ranker or default_ranker()
    if ranker is None:
        return None
    notations = ({h.doc_id: notation_of(h.payload, name_field) or "" for hits in searches for h in hits}
                 if name_field else {})
    return ranker.rank(follow_up, [[(h.doc_id, float(h.score)) for h in hits] for hits in searches], fused, notations)


@functools.cache
def default_ranker() -> ConversationRanker | None:
    """The ranker shipped with the package (``conversation_ranker.json``); None (logged once) when that file is
    missing or refused: follow-ups then keep the RRF fusion."""
    try:
        return ConversationRanker.load(_PATH)
    except (OSError, ValueError) as exc:
        _log.warning("hyde-tutor: the follow-up ranker is off (%s); follow-ups keep the RRF fusion", exc)
        return None


def follow_up_for(history: Sequence[tuple[str, str]], message: str, queries: Sequence[tuple[str, float]],
                  mode: str, name_field: str | None) -> FollowUp | None:
    """The follow-up the ranker orders, or None: it applies in mode ``auto`` to a message searched three ways
    (:func:`~hyde_tutor.hyde.conversation.conversation_queries`), in a domain whose entries have a notation
    (``name_field``)."""
    if mode != "auto" or len(queries) != 3 or name_field is None:
        return None
    return FollowUp.from_history(history, message)


def ranked_depth(follow_up: FollowUp | None, depth: int) -> int:
    """How deep a search reads: at least :data:`SEARCH_DEPTH` when its follow-up is ranked (the ranker's features
    were learned at that depth), else ``depth``."""
    return max(depth, SEARCH_DEPTH) if follow_up is not None else depth
