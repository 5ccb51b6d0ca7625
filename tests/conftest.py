"""Shared test configuration: tiers are chosen by directory (unit, integration, examples)."""
