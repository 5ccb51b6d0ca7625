"""PodOpsLifecycle and PodTransitionRule: the pod operation protocol and the rules that gate it (pure core)."""
