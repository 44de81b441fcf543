"""Adapters for agent frameworks; each is an optional extra."""
