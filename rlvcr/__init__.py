"""RLVCR: RL with variational chain reasoning (``../shared/specs/rlvcr.md``, seed ``001``).

- :mod:`rlvcr.prompts`: level-aware prompt templates, the ``<level>N</level><think>…</think><action>…</action>``
  parser, the level-tag stripper used before the RLLA reward, and the alternative-context builders.
- :mod:`rlvcr.core_rlvcr`: the pure tensor functions (per-level scores, thinking advantage, diversity term,
  trajectory term) and ``compute_rlvcr_outcome_advantage``, registered as ``algorithm.adv_estimator=rlvcr``.
"""
