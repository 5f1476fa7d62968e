"""The error every config check raises (its own module so that the checks can live in several files)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value is inconsistent or missing; the message names the keys."""
