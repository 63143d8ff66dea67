"""Errors that reach the user as one line and exit code 2."""

from __future__ import annotations


class TraceError(Exception):
    """A trace (or path) that cannot be analyzed. The message is shown as is."""
