"""Fixtures of the transport tests: a private ipc address, a hub served from a thread, a watchdog.

Every blocking call in these tests has its own timeout; the watchdog is the last resort that
dumps all stacks and ends the run if a test still hangs.
"""

from __future__ import annotations

import faulthandler
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from atgrpo.messages import Message
from atgrpo.transport import HubEndpoint, private_ipc_address

WATCHDOG_S = 60.0

Handler = Callable[[HubEndpoint, bytes, Message], None]


@pytest.fixture(autouse=True)
def _watchdog() -> Iterator[None]:
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def ipc_address(tmp_path: Path) -> str:
    return private_ipc_address(tmp_path / "ipc")


class HubThread:
    """A `HubEndpoint` whose recv loop runs in a thread and calls `handler(hub, peer, msg)`.

    The hub is bound in the constructor (so clients may connect at once) and closed by `stop()`,
    after which `counters` and `received` may be read.
    """

    def __init__(self, address: str, handler: Handler, **kwargs: Any) -> None:
        self.hub = HubEndpoint(address, **kwargs)
        self.address = self.hub.address
        self.handler = handler
        self.received: list[Message] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                got = self.hub.recv(timeout_s=0.02)
                if got is not None:
                    self.received.append(got[1])
                    self.handler(self.hub, *got)
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    @property
    def counters(self) -> dict[str, int]:
        return self.hub.counters

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert not self._thread.is_alive(), "hub thread did not stop"
        self.hub.close()
        if self.error is not None:
            raise self.error


@pytest.fixture
def serve() -> Iterator[Callable[..., HubThread]]:
    """`serve(address, handler, **hub_kwargs)` starts a `HubThread`; all are stopped at teardown."""
    started: list[HubThread] = []

    def start(address: str, handler: Handler, **kwargs: Any) -> HubThread:
        hub = HubThread(address, handler, **kwargs)
        started.append(hub)
        return hub

    yield start
    for hub in started:
        if not hub.hub.closed:
            hub.stop()
