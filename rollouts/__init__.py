"""rollouts: the operator, the CollaSet controller, the local control plane tooling and the CLI."""
