"""The calls section's report parts: per call site, grouped by severity, with the counts of
calls recorded, replayed and not replayable, and the diff's matching change where this run's
diff section found one (read through the section contract, its stored rows)."""

from __future__ import annotations

from html import escape
from typing import Any

from torchcanary.calls.compare import CallVerdict
from torchcanary.calls.result import CallChange, CallsSummary, SummaryStatus, from_rows
from torchcanary.calls.section import POLICY_DEFAULTS, SECTION
from torchcanary.section_types import JUnitCase

DIFF = "diff"  # the section whose stored changes announce what a call now does
_GROUPS = (
    (CallVerdict.RAISES_NOW, "Raises now"),
    (CallVerdict.DIFFERENT_RESULT, "Different result"),
    (CallVerdict.NEW_WARNING, "New warning"),
    (CallVerdict.NONDETERMINISTIC, "Nondeterministic (differs in the baseline's control)"),
    (
        CallVerdict.NOT_FAITHFUL,
        "Replay not faithful (the baseline replay did not do what the call did)",
    ),
    (CallVerdict.NOT_RUN, "Not run (the replay crashed, timed out or is missing)"),
    (CallVerdict.NOT_REPLAYABLE, "Not replayable"),
)


# the callables with the most calls counted past their sites' samples, one line each
_UNDER_SAMPLED = 10
_UNDER_SAMPLED_TITLE = (
    "Counted past their site's sample (not replayed: a change seen only at their other "
    "shapes or values would be missed)"
)


def _rows(view: Any) -> tuple[CallsSummary | None, list[CallChange]]:
    records = from_rows(view.sections.get(SECTION, []))
    summary = next((r for r in records if isinstance(r, CallsSummary)), None)
    return summary, [r for r in records if isinstance(r, CallChange)]


def announced(view: Any) -> dict[str, str]:
    """What the diff of this run says of each symbol: its change and the notes' words, read
    from its stored rows as ``docs/json-schema.md`` documents them (never its code)."""
    words: dict[str, str] = {}
    for row in view.sections.get(DIFF, []):
        symbol = str(row.payload.get("symbol") or "")
        if symbol:
            notes = "; ".join(row.payload.get("mentions") or ())
            said = f"{row.verdict}: {row.payload.get('detail', '')}"
            words[symbol] = said + (f" (notes: {notes})" if notes else "")
    return words


def _link(change: CallChange, diff_words: dict[str, str]) -> str:
    name = change.callable.removeprefix("torch.Tensor.")
    for symbol in (change.callable, f"torch.{name}", f"torch.Tensor.{name}"):
        if symbol in diff_words:
            return diff_words[symbol]
    return ""


def _headline(summary: CallsSummary) -> str:
    if summary.verdict is SummaryStatus.NOT_CHECKED:
        return f"not checked: {summary.reason}"
    counts = ", ".join(f"{n} {v}" for v, n in sorted(summary.counts.items()))
    share = summary.compared_share()
    unvalued = "; ".join(f"{n} {why}" for why, n in sorted(summary.metadata_only.items()))
    compared = (
        f"{summary.compared_by_value} of {summary.recorded} recorded calls compared "
        f"({share:.0%}) by value; by metadata only: {unvalued or 'none'}; "
        if share is not None
        else ""
    )
    unfollowed = "; ".join(f"{n} {why}" for why, n in sorted(summary.not_followed.items()))
    if unfollowed:
        compared += f"not followed while recording: {unfollowed}; "
    sampled = (
        f" (a bounded sample of each site's calls: {summary.not_sampled} more counted, "
        "not replayed)"
        if summary.not_sampled
        else ""
    )
    if summary.not_examined:
        sampled += (
            f" ({summary.not_examined} more counted while the recorder rested, after calls "
            "that met no new kind of call: one among them that a glance could not tell from "
            "those before is not recorded)"
        )
    return compared + (
        f"{summary.recorded} distinct call(s) recorded under the baseline{sampled}, "
        f"{summary.replayed} replayed in both versions, "
        f"{summary.recorded - summary.replayed} not replayable ({counts}); "
        f"while recorded: {summary.recording_run}"
    )


def _reproducer(view: Any, change: CallChange) -> str:
    """The link to the change's verified reproducer (``torchcanary repro``), relative to the
    run's output folder; empty when it has none."""
    folder = view.reproducers.get(f"{SECTION}:{change.key}")
    return f"{folder}/repro.py" if folder else ""


def _lines(view: Any) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each group's title and lines, each line with its reproducer's link (or empty)."""
    summary, changes = _rows(view)
    diff_words = announced(view)
    groups = []
    for verdict, title in _GROUPS:
        lines = []
        for change in (c for c in changes if c.verdict is verdict):
            link = _link(change, diff_words)
            ran = f" (ran {change.count}x)" if change.count > 1 else ""
            line = change.sentence() + ran + (f"; diff: {link}" if link else "")
            if change.announced.get("notes"):
                line += f"; the release notes name it: {change.announced['notes']}"
            if change.announced.get("notes_say"):
                line += f' ("{change.announced["notes_say"]}")'
            # the Markdown shows each line as code
            lines.append((line.replace("`", "'"), _reproducer(view, change)))
        if lines:
            groups.append((title, lines))
    if summary is not None and summary.not_sampled_by:
        groups.append((_UNDER_SAMPLED_TITLE, _under_sampled(summary.not_sampled_by)))
    return groups


def _under_sampled(counted: dict[str, int]) -> list[tuple[str, str]]:
    """The callables with the most calls past their sample, most first, then how many more."""
    ranked = sorted(counted.items(), key=lambda item: (-item[1], item[0]))
    lines = [(f"{name}: {n} call(s)", "") for name, n in ranked[:_UNDER_SAMPLED]]
    rest = ranked[_UNDER_SAMPLED:]
    if rest:
        more = sum(n for _, n in rest)
        lines.append((f"{len(rest)} more callable(s): {more} call(s)", ""))
    return lines


def markdown(view: Any) -> str:
    summary, _changes = _rows(view)
    if summary is None:
        return ""
    parts = ["## Your calls, replayed", "", _headline(summary), ""]
    for title, lines in _lines(view):
        items = [f"- `{text}`" + (f" ([Reproduce]({to}))" if to else "") for text, to in lines]
        parts += [f"### {title}", "", *items, ""]
    return "\n".join(parts)


def html(view: Any) -> str:
    summary, _changes = _rows(view)
    if summary is None:
        return ""
    body = [f"<h2>Your calls, replayed</h2><p>{escape(_headline(summary))}</p>"]
    for title, lines in _lines(view):
        items = "".join(
            f"<li><code>{escape(line)}</code>"
            + (f' <a class="reproduce" href="{escape(link)}">Reproduce</a>' if link else "")
            + "</li>"
            for line, link in lines
        )
        body.append(f"<h3>{escape(title)}</h3><ul>{items}</ul>")
    return f'<section id="calls">{"".join(body)}</section>'


def junit_cases(view: Any) -> list[JUnitCase]:
    """One case for the replay, one per changed call (a failure when the default policy
    blocks on its verdict)."""
    summary, changes = _rows(view)
    if summary is None:
        return []
    suite = "torchcanary.calls"
    status = "error" if summary.verdict is SummaryStatus.NOT_CHECKED else "passed"
    cases = [JUnitCase(suite, "record and replay your calls", status, message=_headline(summary))]
    blocking = set(POLICY_DEFAULTS["calls_block_on"])
    for change in changes:
        failed = change.verdict.value in blocking
        cases.append(
            JUnitCase(
                suite,
                f"{change.site} {change.callable}",
                "failure" if failed else "passed",
                message=f"{change.verdict}: {change.detail}",
            )
        )
    return cases


def json_parts(view: Any) -> dict[str, Any]:
    """``calls`` in results.json: the counts and each changed call with its group."""
    summary, changes = _rows(view)
    if summary is None:
        return {}
    diff_words = announced(view)
    return {
        "calls": {
            "summary": summary.to_json()["payload"] | {"verdict": summary.verdict.value},
            "changes": [
                {
                    **_public(c.to_json()["payload"]),
                    "verdict": c.verdict.value,
                    "diff": _link(c, diff_words),
                }
                for c in changes
            ],
        }
    }


def _public(payload: dict[str, Any]) -> dict[str, Any]:
    """A change's stored payload without the recorded call kept for ``torchcanary repro``
    (arguments' bytes, not a result)."""
    extra = {k: v for k, v in payload.get("extra", {}).items() if k != "call"}
    return {**payload, "extra": extra}
