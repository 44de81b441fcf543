"""THINKING_* events AG-UI 1.0 dropped, importable here as before (see threadstore.codec)."""

from threadstore.codec import thinking
from threadstore.codec.thinking import *  # noqa: F403 - this module is the old name of that one

__all__ = thinking.__all__
