"""RLVCR: RL with variational chain reasoning (``docs/rlvcr.md``).

- :mod:`rlvcr.prompts`: level-aware prompt templates, the ``<level>N</level><think>…</think><action>…</action>``
  parser, the level-tag stripper used before the RLLA reward, and the alternative-context builders.
- :mod:`rlvcr.core_rlvcr`: the pure tensor functions (per-level scores, thinking advantage, diversity term,
  trajectory term) and ``compute_rlvcr_outcome_advantage``, registered as ``algorithm.adv_estimator=rlvcr``.
- :mod:`rlvcr.rollout_phase`: the rollout-side phase (alternative thinks per level, action entropy of the original
  action tokens under every level's context) run by ``RayPPOTrainer`` on RLLA rows and by
  ``TrajectoryCollector.rlvcr_multi_turn_loop`` on agent steps.
"""
