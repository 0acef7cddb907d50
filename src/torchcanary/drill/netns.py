"""A private network for the network drills: one Linux namespace per rank, one bridge.

Each rank (or each torchrun node) runs in its own network namespace, joined to a bridge in
the host namespace by a veth pair; the drill's store listens on the bridge. A fault acts on
one rank's host-side veth:
- cut: the link is set down, so its packets go nowhere and its peers see silence, not a
  reset (like a pulled cable);
- slow: a token-bucket filter (tc ``tbf``) caps the link's rate in both directions.
This kernel has no ``netem`` qdisc, so delay and loss emulation are not used; rate limits
and link down are what the drills can do, and the report says so.

Everything is created under names derived from the drill's token and removed in
``close()``, which the drill calls in a ``finally``; deleting a namespace removes the veth
ends inside it and their host-side peers with them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

NS_PREFIX = "torchcanary-"
RANK_IFNAME = "tcnet0"  # the same name inside every namespace, so GLOO_SOCKET_IFNAME is one


class NetworkUnavailable(RuntimeError):
    """Namespaces cannot be made here; the message says why (for 'not-checkable')."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetworkUnavailable(f"'ip {' '.join(args)}' failed: {result.stderr.strip()}")
    return result


def _tc(*args: str) -> None:
    result = subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise NetworkUnavailable(f"'tc {' '.join(args)}' failed: {result.stderr.strip()}")


def why_unavailable(need_tc: bool) -> str | None:
    """None when namespaces (and tc, if asked) can be used here, else the reason."""
    if shutil.which("ip") is None:
        return "the 'ip' command (iproute2) is not installed"
    if need_tc and shutil.which("tc") is None:
        return "the 'tc' command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); this process is not root"
    return None


def leftover_namespaces() -> list[str]:
    """torchcanary namespaces that exist now (after a drill: should be none of its own)."""
    if shutil.which("ip") is None:
        return []
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    return [line.split()[0] for line in listed if line.startswith(NS_PREFIX)]


@dataclass
class RankNetwork:
    """The namespaces, veths and bridge of one drill; usable as a context manager."""

    token: str
    ranks: int
    # Another user of namespaces (a test Ray cluster) names and numbers its own apart, so
    # a drill's leak check never counts them as the drill's.
    name_prefix: str = NS_PREFIX
    second_octet: int = 213
    namespaces: list[str] = field(default_factory=list)
    _bridge: str | None = None

    @property
    def subnet(self) -> str:
        return f"10.{self.second_octet}.{int(self.token[:2], 16)}"

    @property
    def store_address(self) -> str:
        return f"{self.subnet}.1"

    def rank_address(self, rank: int) -> str:
        return f"{self.subnet}.{rank + 2}"

    def host_veth(self, rank: int) -> str:
        return f"tch{self.token[:6]}{rank}"

    def __enter__(self) -> RankNetwork:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        bridge = f"tcb{self.token[:6]}"
        _ip("link", "add", bridge, "type", "bridge")
        self._bridge = bridge
        _ip("addr", "add", f"{self.store_address}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for rank in range(self.ranks):
            namespace = f"{self.name_prefix}{self.token}-{rank}"
            _ip("netns", "add", namespace)
            self.namespaces.append(namespace)
            inner = f"tci{self.token[:6]}{rank}"
            _ip("link", "add", self.host_veth(rank), "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", namespace)
            _ip("-n", namespace, "link", "set", inner, "name", RANK_IFNAME)
            _ip("-n", namespace, "addr", "add", f"{self.rank_address(rank)}/24", "dev", RANK_IFNAME)
            _ip("-n", namespace, "link", "set", RANK_IFNAME, "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            _ip("link", "set", self.host_veth(rank), "master", bridge, "up")

    def prefix(self, rank: int) -> list[str]:
        """The command prefix that runs a program inside ``rank``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[rank]]

    def cut(self, rank: int) -> None:
        _ip("link", "set", self.host_veth(rank), "down")

    def restore(self, rank: int) -> None:
        _ip("link", "set", self.host_veth(rank), "up")

    def slow(self, rank: int, rate: str) -> None:
        """Cap ``rank``'s link at ``rate`` (tc syntax, e.g. '8mbit') both ways with tbf."""
        shape = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
        _tc("qdisc", "add", "dev", self.host_veth(rank), *shape)
        _tc("-n", self.namespaces[rank], "qdisc", "add", "dev", RANK_IFNAME, *shape)

    def close(self) -> None:
        for namespace in self.namespaces:
            _ip("netns", "delete", namespace, check=False)
        self.namespaces = []
        for rank in range(self.ranks):
            _ip("link", "delete", self.host_veth(rank), check=False)
        if self._bridge is not None:
            _ip("link", "delete", self._bridge, check=False)
            self._bridge = None
