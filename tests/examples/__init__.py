"""Examples tier: every manifest in examples/ is applied to the local cluster and checked.

The examples themselves land with the user-path issue (playground and quickstart).
"""
