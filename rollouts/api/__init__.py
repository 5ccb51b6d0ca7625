"""API models of our custom resources (pydantic; the source of the CRDs) and their admission rules."""
