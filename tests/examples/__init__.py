"""Examples tier: every manifest in examples/ is applied to the local cluster and its outcome checked (examples land with the user-path issue)."""
