"""The plain data that crosses process and disk boundaries.

Both sides import this module: the worker (inside someone else's environment, under any
torch version) and the orchestrator. It therefore uses the standard library only. Every
record is a frozen dataclass with a lossless JSON form; ``SCHEMA_VERSION`` changes whenever
that form does.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

SCHEMA_VERSION = 1
# The key under which a section's result record stores its payload version. A payload
# without it was written before the records were versioned: that form is version 1.
RECORD_SCHEMA_KEY = "schema"


class ComparisonStatus(str, enum.Enum):
    """Whether a section compared the baseline's side with the candidate's (two runs of a
    command, two API surfaces), and whether anything changed: a summary row's verdict."""

    CHANGES = "changes"
    NO_CHANGES = "no-changes"
    NOT_COMPARED = "not-compared"

    def __str__(self) -> str:
        return self.value


class SectionRecord(Protocol):
    """One stored result of a section: a row ``(key, env_role, verdict, payload)``, typed.

    Each section's record module (``bench/result.py``, ``stack/result.py``, ...) defines
    frozen dataclasses of this shape with a verdict enum; ``to_json`` gives the form
    ``{"key", "env_role", "verdict", "payload"}`` (the payload carrying its ``schema``
    version) that the store keeps and ``results.json`` shows, and the section's
    ``record_from_json`` reads it back, the unversioned form of older runs included.
    """

    @property
    def key(self) -> str: ...

    @property
    def env_role(self) -> str: ...

    @property
    def verdict(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


def payload_version(payload: Mapping[str, Any], newest: int) -> int:
    """The schema version of a stored payload; ValueError for one newer than this code."""
    version = payload.get(RECORD_SCHEMA_KEY, 1)
    if not isinstance(version, int) or version < 1 or version > newest:
        raise ValueError(
            f"result payload schema {version!r} is not one this torchcanary reads "
            f"(1 to {newest}); upgrade torchcanary to read this run"
        )
    return version


@dataclass(frozen=True)
class Manifest:
    """What an environment is: collected inside it by the worker, stored as a flat dict.

    Kept as a mapping rather than fixed fields because torch versions expose different
    facts; ``CONFOUND_KEYS`` names the ones that matter when two environments are compared.
    """

    facts: dict[str, Any]

    CONFOUND_KEYS = (
        "torch_build_variant",
        "cuda_version",
        "cuda_arch_list",
        "hip_version",
        "python_version",
        "blas",
        "mkldnn_version",
        "openmp",
        "torch_num_threads",
        "cpu_capability",
        "compiler",
        "numpy_version",
    )

    def to_json(self) -> dict[str, Any]:
        return dict(self.facts)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(facts=dict(data))

    def confounds_against(self, other: Manifest) -> dict[str, tuple[Any, Any]]:
        """Facts other than the torch version on which two environments differ."""
        return {
            key: (self.facts.get(key), other.facts.get(key))
            for key in self.CONFOUND_KEYS
            if self.facts.get(key) != other.facts.get(key)
        }


# The fields of a record that live in the row itself, not in its payload. A record that
# declares ``stored_order`` (the payload's keys in the order they were stored) is written
# back in that order, so a row read and written again is the same text.
ORDER_FIELD = "stored_order"
_ROW_FIELDS = frozenset({"key", "env_role", "verdict", "schema_version", "extra", ORDER_FIELD})


def payload_fields(cls: type) -> frozenset[str]:
    """The fields of a record class that its payload stores (not key, role, verdict, ...)."""
    return frozenset(item.name for item in fields(cls) if item.name not in _ROW_FIELDS)


def record_payload(record: Any, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The JSON payload of a record dataclass: its own fields, then what it kept as ``extra``.

    A field named in ``optional`` is left out while it is None, as the section wrote it
    before the records existed; tuples become lists. ``extra`` holds keys this version does
    not know (written by a newer torchcanary, or by a section adding facts), so a record
    read and written again loses nothing.
    """
    data: dict[str, Any] = {RECORD_SCHEMA_KEY: record.schema_version}
    for item in fields(record):
        if item.name in _ROW_FIELDS:
            continue
        value = getattr(record, item.name)
        if value is None and item.name in optional:
            continue
        data[item.name] = list(value) if isinstance(value, tuple) else value
    payload = {**record.extra, **data}
    order: tuple[str, ...] = getattr(record, ORDER_FIELD, ())
    if order:  # keys the stored row did not have (its schema version) come last
        rank = {name: index for index, name in enumerate(order)}
        payload = dict(sorted(payload.items(), key=lambda item: rank.get(item[0], len(rank))))
    return payload


def record_row(record: Any, optional: frozenset[str] = frozenset()) -> dict[str, Any]:
    """A record's stored form ``{key, env_role, verdict, payload}`` (see ``record_payload``)."""
    return {
        "key": record.key,
        "env_role": record.env_role,
        "verdict": record.verdict.value,
        "payload": record_payload(record, optional),
    }


def record_arguments(cls: type, payload: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``cls`` from a stored payload: known fields, the rest as extra.

    Missing fields take the dataclass's defaults (a payload from a smaller run, or a
    hand-built one in a test); lists read into tuple fields become tuples.
    """
    known = {item.name: item for item in fields(cls) if item.name not in _ROW_FIELDS}
    arguments: dict[str, Any] = {}
    for name, value in payload.items():
        if name in known:
            tuple_field = str(known[name].type).startswith("tuple")
            arguments[name] = tuple(value) if tuple_field and isinstance(value, list) else value
    arguments["extra"] = {
        k: v for k, v in payload.items() if k not in known and k != RECORD_SCHEMA_KEY
    }
    if any(item.name == ORDER_FIELD for item in fields(cls)):
        arguments[ORDER_FIELD] = tuple(payload)
    return arguments
