"""Workflows turn a Task and a rollout engine into a scored group of experiences."""
