"""PodTransitionRule: the API model, its admission checks and the rule evaluation core.

Flow: :mod:`.models` (the CRD, spec and status) -> :mod:`.validating` (admission) ->
:mod:`.evaluating` (pure per-stage verdicts over :class:`.subjects.PodView`) with
:mod:`.webhooks` (the pure webhook protocol) and :mod:`.calling` (its only I/O).
"""
