"""Errors shared by the config modules (config.py, steering.py) without either importing the other.

ConfigError is re-exported by sluice.config, where callers find it: ``from sluice.config import
ConfigError``.
"""

__all__ = ["ConfigError"]


class ConfigError(Exception):
    """A configuration problem. ``path`` is the dotted field path ('' for the
    whole document), ``msg`` the explanation; str() gives 'path: msg'."""

    def __init__(self, path, msg):
        self.path = path
        self.msg = msg
        super().__init__(f"{path}: {msg}" if path else msg)
