"""Decode strategies, one per decode family."""
