"""Turning serialized checkpoints into files."""
