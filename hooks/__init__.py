"""Lifecycle hooks: planning and rendering the Jobs that run at progress points of a rollout."""
