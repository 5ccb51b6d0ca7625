"""PodOpsLifecycle and PodTransitionRule: the pod operation protocol and the rules that gate it.

The pure core: no operator framework, no API client, no templates.
"""
