"""The conformance kit for plugin authors (implemented in ``app.testing``; see there)."""

from app.testing import *  # noqa: F403  (the kit's public names, listed once: app.testing.__all__)
from app.testing import __all__ as __all__
