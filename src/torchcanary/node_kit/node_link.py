"""Cutting or slowing one node's link to its drill peers, on that node, undone on its own.

Runs on the node (inside its drill's ``DrillHost``): on a real cluster the driver has no access to a
node's links, so the change must be made where the link is.

- cut (``net-down``): a blackhole route to each peer's address. What the node sends to a
  peer is dropped before it leaves and what a peer sends gets no answer, so both sides see
  silence, as with a pulled cable; the node's other traffic (its default route, an
  operator's ssh) is untouched, and only ``ip`` is needed (no iptables).
- slow (``net-slow``): a tc ``tbf`` on the device towards the peers caps what the node
  sends. Egress only: shaping what arrives needs a tc classifier (ingress police, an ifb
  redirect), which the kernels these drills ran on lack.

A change is never left to the driver to undo: once made, a shell in a session of its own
holds it and undoes it when its hold ends or when it is told to stop (``lift``), whichever
comes first, so a driver that dies, or a drill actor that is killed, leaves no cut behind
past the hold.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

HOLDER_NAME = "torchcanary-link-hold"  # argv[0] of the holding shell, for a reader of ps


def network_identity() -> str:
    """This process's network stack: machine boot id and network namespace inode.

    Two nodes with the same identity share every link, so neither has a link of its own
    to cut (nodes of a test cluster on 127.0.0.1); different machines never share one.
    """
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{boot}:{os.stat('/proc/self/ns/net').st_ino}"


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def device_towards(peer: str) -> str:
    """The network interface this node reaches ``peer`` through (``ip route get``)."""
    route = _ip_out("route", "get", peer).split()
    return route[route.index("dev") + 1]


def device_holding(address: str) -> str:
    """The interface that holds ``address`` here: the one gloo should bind to."""
    listed = _ip_out("-o", "addr", "show", "to", address).split()
    if len(listed) < 2:
        raise RuntimeError(f"no interface on this node holds {address}")
    return listed[1]


@dataclass
class HeldChange:
    """A change to this node's link, held by a detached shell that undoes it."""

    detail: str
    holder: subprocess.Popen[bytes]

    @classmethod
    def make(cls, fault: str, peers: list[str], rate: str, hold_s: float) -> HeldChange:
        """Cut (``net-down``) or slow (``net-slow``) the link to ``peers`` for ``hold_s``."""
        if not peers:
            raise RuntimeError("no peer address to cut or slow the link to")
        if fault == "net-down":
            changes = [["ip", "route", "add", "blackhole", f"{peer}/32"] for peer in peers]
            undo = [["ip", "route", "del", "blackhole", f"{peer}/32"] for peer in peers]
            detail = f"link to {', '.join(peers)} cut (blackhole routes)"
        elif fault == "net-slow":
            devices = sorted({device_towards(peer) for peer in peers})
            shape = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
            changes = [["tc", "qdisc", "add", "dev", device, *shape] for device in devices]
            undo = [["tc", "qdisc", "del", "dev", device, "root"] for device in devices]
            detail = f"sending on {', '.join(devices)} limited to {rate} (tc tbf)"
        else:
            raise ValueError(f"{fault} is not a change to a node's link")
        made: list[list[str]] = []
        try:
            for change, reverse in zip(changes, undo, strict=True):
                _run(change)
                made.append(reverse)
        except BaseException:
            for reverse in reversed(made):
                with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                    _run(reverse)
            raise
        return cls(f"{detail}, undone on the node within {hold_s:g} s", _hold(made, hold_s))

    def lift(self) -> None:
        """End the hold now: the shell undoes the change and exits."""
        if self.holder.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.holder.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.holder.wait(timeout=30)


def _hold(undo: list[list[str]], hold_s: float) -> subprocess.Popen[bytes]:
    """A shell that runs ``undo`` after ``hold_s`` seconds or on SIGTERM/SIGINT/SIGHUP.

    Its own session, and no drill token in its environment: killing the drill's processes
    (or the actor) must not take the undo with them.
    """
    reverse = "; ".join(f"{shlex.join(command)} 2>/dev/null" for command in reversed(undo))
    script = (
        f"undo() {{ kill $! 2>/dev/null; {reverse}; }}\n"
        "trap 'exit 0' TERM INT HUP\n"
        "trap undo EXIT\n"
        f"sleep {hold_s:.1f} & wait $!\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHCANARY_DRILL")}
    return subprocess.Popen(
        ["sh", "-c", script, HOLDER_NAME],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _ip_out(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30).stdout


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"'{shlex.join(command)}' failed: {done.stderr.strip()}")
