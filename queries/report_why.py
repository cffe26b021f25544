"""The first thing a failed run's page says: what failed, where, and its last lines.

A user who opens a failed run's postmortem wants the error before anything else.
:func:`why` picks the failure the run ended on (the last incident that has a
class: its final generation's, whatever came before) and shows its class,
signature and action, the member and node, the controller's detail, the
worker's log path and its last lines of output, wrapped, with no horizontal
scroll. :func:`why_lines` is the same for the text form. A run that did not
fail gets nothing: its page opens with the summary as before.

Tested in tests/queries/test_report.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from queries.report_html import esc

# The most of a worker's last output shown at the top (the incidents table has it all).
TOP_LINES = 30


def ending_failure(outcome: object, incidents: Sequence[Mapping[str, Any]]
                   ) -> Mapping[str, Any] | None:
    """The incident a failed run ended on; None for a run that did not fail."""
    if outcome != "failed":
        return None
    classified = [r for r in incidents if r.get("failure_class")]
    return classified[-1] if classified else None


def _last_lines(text: object, n: int = TOP_LINES) -> str:
    lines = str(text or "").rstrip("\n").splitlines()
    cut = len(lines) - n
    return ("…\n" if cut > 0 else "") + "\n".join(lines[max(cut, 0):])


def _where(r: Mapping[str, Any]) -> str:
    member = r.get("member") or "the run"
    node = f" on node {r['node']}" if r.get("node") else ""
    return f"{member}{node}, generation {r.get('generation')}"


def why(run_id: str, outcome: object, reason: object,
        incidents: Sequence[Mapping[str, Any]]) -> str:
    """The page's opening section for a failed run ('' otherwise)."""
    r = ending_failure(outcome, incidents)
    if r is None:
        if outcome != "failed":
            return ""
        return ('<section id="why" class="why"><h2>Why it failed</h2>'
                f"<p>{esc(reason or 'no failure was classified')}</p></section>")
    output = _last_lines(r.get("stderr_tail"))
    log = r.get("log_path") or ""
    return (
        '<section id="why" class="why"><h2>Why it failed</h2>'
        f'<p class="what"><span class="badge failed">{esc(r.get("failure_class"))}</span> '
        f"<code>{esc(r.get('signature'))}</code> → {esc(r.get('action'))}, "
        f"{esc(_where(r))}</p>"
        + (f"<p>{esc(reason)}</p>" if reason else "")
        + (f"<p>{esc(r['detail'])}</p>" if r.get("detail") else "")
        + (f'<p>log <code id="why-log">{esc(log)}</code> '
           f"(<code>runledger logs {esc(run_id)} --tail 100</code> where it can be read)</p>"
           if log else "<p>no log file was reported for this failure</p>")
        + (f'<pre id="why-output">{esc(output)}</pre>' if output else
           '<p class="empty">no output was reported</p>')
        + "</section>")


def why_lines(outcome: object, incidents: Sequence[Mapping[str, Any]]) -> list[str]:
    """The same for the text form (``runledger report RUN --text``)."""
    r = ending_failure(outcome, incidents)
    if r is None:
        return []
    lines = [f"Why it failed: {r.get('failure_class')} {r.get('signature')} -> "
             f"{r.get('action')}, {_where(r)}"]
    if r.get("log_path"):
        lines.append(f"log: {r['log_path']}")
    output = _last_lines(r.get("stderr_tail"), 10)
    lines += [f"  {line}" for line in output.splitlines()]
    return lines
