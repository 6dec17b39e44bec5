"""The IR harness (metrics, BEIR sets, eval arms, plots, agent replay, splits), the drills (bench, load, chaos) and the demo."""

from .beir import ArmResult, BeirDataset, EvalQuery, evaluate_arms, load_beir, report_json, report_table
from .metrics import mrr_at_k, ndcg_at_k, precision_at_k, recall_at_k, score_run

__all__ = [
    "ArmResult",
    "BeirDataset",
    "EvalQuery",
    "evaluate_arms",
    "load_beir",
    "mrr_at_k",
    "ndcg_at_k",
    "precision_at_k",
    "recall_at_k",
    "report_json",
    "report_table",
    "score_run",
]
