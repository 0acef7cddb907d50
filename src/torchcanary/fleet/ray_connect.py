"""Connecting the driver to a Ray cluster, with a deadline and one-line errors.

Ray's own client retries for minutes and prints tracebacks; here an address that cannot be
reached, or a client server that keeps refusing, ends in one FleetError naming the address
and the fix within about the connect timeout.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torchcanary
from torchcanary.errors import FleetError
from torchcanary.fleet.ray_executor import RayExecutor, one_line
from torchcanary.fleet.secrets import strip_text

DEFAULT_CONNECT_TIMEOUT_S = 15.0
_FIX = "check the address (HOST:PORT or ray://HEAD:10001) and that the Ray head node is up"
# What Ray's client raises with when the head's client server refuses a connection.
_REFUSED = "Initialization failure from server"
_RETRY_PAUSE_S = 2.0


def connect(
    address: str, *, timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, ship_code: bool = True
) -> RayExecutor:
    """Connect to the Ray cluster at ``address`` (``ray://HEAD:10001``, ``HOST:PORT``, ``auto``).

    ``auto`` joins the Ray job this process runs in, or the cluster ``RAY_ADDRESS`` names.
    An address that cannot be reached raises FleetError within about ``timeout_s``: Ray's
    own client retries for minutes, so the address is probed first and ``ray.init`` is
    given a deadline. ``ship_code`` sends this torchcanary package to the nodes (Ray's
    ``py_modules``), so nodes need only Python and Ray, not torchcanary installed.
    """
    ray = _import_ray()
    if ray.is_initialized():
        return RayExecutor(ray, owns_connection=False)
    target = _resolve(address)
    if target is not None:
        _probe(address, target, timeout_s)
    init_kwargs: dict[str, Any] = {
        "address": address,
        "log_to_driver": False,
        "logging_level": logging.WARNING,
    }
    if ship_code:
        init_kwargs["runtime_env"] = {"py_modules": [str(Path(torchcanary.__file__).parent)]}
    _init_with_deadline(ray, address, init_kwargs, timeout_s)
    return RayExecutor(ray, owns_connection=True)


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError as exc:
        raise FleetError(
            f"--fleet needs Ray, which is not installed ({exc}); "
            "install it with: pip install 'torchcanary[ray]'"
        ) from None
    return ray


def _resolve(address: str) -> tuple[str, int] | None:
    """The head's host and port to probe, or None when Ray finds the cluster itself."""
    if address == "auto":
        import os

        address = os.environ.get("RAY_ADDRESS", "")
        if not address or address in ("auto", "local"):
            return None
    host_port = address.removeprefix("ray://").rstrip("/")
    host, sep, port = host_port.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FleetError(f"cannot read the Ray cluster address {address!r}; {_FIX}")
    return host.strip("[]"), int(port)


def _probe(address: str, target: tuple[str, int], timeout_s: float) -> None:
    try:
        with socket.create_connection(target, timeout=min(timeout_s, 5.0)):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise FleetError(f"cannot reach the Ray cluster at {address} ({reason}); {_FIX}") from None


def _init_with_deadline(
    ray: ModuleType, address: str, init_kwargs: dict[str, Any], timeout_s: float
) -> None:
    """``ray.init`` that gives up after ``timeout_s``: a wrong port can make it wait minutes.

    A Ray client server that could not start this client's own server (on a busy head,
    Ray's proxier gives it 30 s) refuses with "Initialization failure from server"; that is
    tried again while the deadline allows, and the error names every refusal.
    """
    deadline = time.monotonic() + timeout_s
    refusals: list[str] = []
    while True:
        outcome = _init_once(ray, init_kwargs, max(deadline - time.monotonic(), 0.0))
        if outcome is None:
            return
        refusal = _server_refusal(outcome)
        if refusal is None:
            break
        refusals.append(refusal)
        if deadline - time.monotonic() < _RETRY_PAUSE_S:
            break
        time.sleep(_RETRY_PAUSE_S)
    raise FleetError(f"{_connect_failure(address, timeout_s, outcome, refusals)}; {_FIX}")


class _NoAnswer(Exception):
    """``ray.init`` was still trying when the deadline came."""


def _connect_failure(
    address: str, timeout_s: float, last: BaseException, refusals: list[str]
) -> str:
    """Why connecting failed, naming every refusal of the client server before."""
    if _server_refusal(last) is not None:
        return (
            f"cannot connect to the Ray cluster at {address}: its client server refused "
            f"{len(refusals)} connection(s) in {timeout_s:.0f}s, the last: {refusals[-1]}"
        )
    before = (
        f" (its client server refused {len(refusals)} connection(s) first, the last: "
        f"{refusals[-1]})"
        if refusals
        else ""
    )
    if isinstance(last, _NoAnswer):
        return f"the Ray cluster at {address} did not answer within {timeout_s:.0f}s{before}"
    return f"cannot connect to the Ray cluster at {address}: {one_line(last)}{before}"


def _init_once(
    ray: ModuleType, init_kwargs: dict[str, Any], timeout_s: float
) -> BaseException | None:
    """One ``ray.init``: None once connected, else its error (``_NoAnswer`` past the time).

    Connecting from a thread is the point (the deadline); a try that outlives it goes on
    in its daemon thread, as Ray's own retries cannot be stopped from here.
    """
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            ray.init(**init_kwargs)
            outcome.append(None)
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)

    # Ray warns on stderr about connecting from a thread, which would make the one-line
    # errors that follow two lines.
    ray_worker_log = logging.getLogger("ray._private.worker")
    ray_worker_log.addFilter(_not_main_thread_warning)
    thread = threading.Thread(target=attempt, name="torchcanary-ray-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    ray_worker_log.removeFilter(_not_main_thread_warning)
    return outcome[0] if outcome else _NoAnswer()


def _server_refusal(exc: BaseException) -> str | None:
    """What a Ray client server said when it refused the connection, or None if it did not.

    Ray puts the server's traceback after its first line; the last line says what failed.
    """
    text = str(exc).strip()
    if not (isinstance(exc, ConnectionAbortedError) and text.startswith(_REFUSED)):
        return None
    said = text.removeprefix(_REFUSED).lstrip(":").strip().splitlines()
    return strip_text(said[-1].strip() if said else "no reason given")[:300]


def _not_main_thread_warning(record: logging.LogRecord) -> bool:
    return "is not the main thread" not in record.getMessage()
