"""Placeholder: being written (see the issues)."""
