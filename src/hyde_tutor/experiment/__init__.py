"""The A/B experiment: who gets HyDE, what each turn recorded, what the learners' outcomes say.

``assignment`` (arms, the per-learner split, the decision) sits below the plugin: the toolset asks it for a
learner's arm and nothing else of this package. Everything else sits above the plugin and reads what it
records: the event log and its SQL store (``events``, ``sqlstore``, ``sqlconversations``), run-time operations
(``operations``), the outcomes that arrive later (``judge``, ``rephrase``), the statistics (``abstats``,
``sequential``, ``always_valid``, ``treatment``), the report (``outcomes``, ``outcome_text``, ``abreport``) and
the simulated experiment (``simulation``).
"""
