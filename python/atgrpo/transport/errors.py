"""Typed errors of the transport layer, one class per reason code.

Defined in the leaf module `atgrpo.errors.transport` (which states their invariants), so that
`atgrpo.errors` loads no zmq; re-exported here for the transport's own imports.
"""

from __future__ import annotations

from atgrpo.errors.transport import *  # noqa: F403
from atgrpo.errors.transport import __all__ as __all__
