"""Pure planning for CollaSets: revisions, scaling and updating decided from a frozen snapshot (no I/O)."""
