"""``stead usage``: the usage ledger of every workspace (or one), totalled by
workspace, agent, session, model and day, read straight from the store beside
a running server, as ``GET /v1/usage`` reports one workspace's."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import anyio
import typer

from stead import usage as accounting
from stead.cli_support import DataDir, chosen_workspace, console, existing, opened
from stead.config import Settings

if TYPE_CHECKING:
    from rich.table import Table

    from stead.store import LedgerRow, Store

GROUPS = ("workspace", "agent", "session", "model", "day")
DEFAULT_DAYS = 30
SANDBOX = "(sandbox time)"
"""What a row without a model (sandbox time) or session (a shared sandbox) shows."""
DELETED = "(deleted session)"
"""The agent of a deleted session's usage: the session, and with it its agent, is gone."""


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One ledger row with what the ledger does not hold: its workspace and agent."""

    workspace_id: str
    agent_id: str | None
    row: LedgerRow


KEYS: dict[str, Callable[[UsageLine], str]] = {
    "workspace": lambda line: line.workspace_id,
    "agent": lambda line: line.agent_id or (DELETED if line.row.session_id else SANDBOX),
    "session": lambda line: line.row.session_id or SANDBOX,
    "model": lambda line: line.row.model or SANDBOX,
    "day": lambda line: line.row.day.isoformat(),
}


def usage(
    first: Annotated[
        str | None, typer.Option("--from", help="First UTC day (YYYY-MM-DD), included.")
    ] = None,
    last: Annotated[
        str | None, typer.Option("--to", help="Last UTC day, included; default: today.")
    ] = None,
    workspace: Annotated[
        str | None, typer.Option(help="Only this workspace id; default: every one.")
    ] = None,
    by: Annotated[
        list[str] | None,
        typer.Option(help=f"Tables to show, repeatable: {', '.join(GROUPS)}; default: all."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Print usage (tokens, list cost, sandbox time) per workspace, agent,
    session, model and day; default: the last 30 days."""
    end = _day("--to", last) or datetime.now(UTC).date()
    # Never before the first day a date can name (--to 0001-01-05 is a day too).
    start = _day("--from", first) or date.fromordinal(max(1, end.toordinal() - DEFAULT_DAYS + 1))
    if start > end:
        _fail("--from must not be after --to")
    groups = tuple(by or GROUPS)
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        _fail(f"--by {unknown[0]}: choose from {', '.join(GROUPS)}")
    settings = existing(data_dir)
    lines = anyio.run(_lines, settings, start, end, workspace)
    total = accounting.report(_summed(lines))
    tables = {group: _grouped(lines, group) for group in groups}
    if as_json:
        span = {"from": start.isoformat(), "to": end.isoformat()}
        print(json.dumps({"type": "usage_report", **span, "total": total, "by": tables}))
        return
    out = console()
    out.print(f"usage {start} to {end}, UTC days ({settings.data_dir})")
    for group in groups:
        out.print(_table(group, tables[group], total))


def _day(option: str, text: str | None) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        _fail(f"{option} {text!r}: give a day as YYYY-MM-DD")


def _fail(message: str) -> NoReturn:
    typer.echo(f"stead: {message}", err=True)
    raise typer.Exit(2)


async def _lines(settings: Settings, first: date, last: date, only: str | None) -> list[UsageLine]:
    async with opened(settings) as store:
        workspaces = [w.id for w in await store.list_workspaces()]
        if only is not None:
            workspaces = [await chosen_workspace(store, settings, only)]
        lines: list[UsageLine] = []
        for workspace_id in workspaces:
            rows = await store.usage_ledger(workspace_id, first, last)
            agents = await _agents(store, workspace_id, {r.session_id for r in rows})
            lines += [UsageLine(workspace_id, agents.get(r.session_id or ""), r) for r in rows]
        return lines


async def _agents(store: Store, workspace_id: str, sessions: set[str | None]) -> dict[str, str]:
    """Each session's agent id (a deleted session's usage has none to show)."""
    from stead.store import NotFound

    found: dict[str, str] = {}
    for session_id in sessions - {None}:
        assert session_id is not None
        try:
            record = await store.get_session(workspace_id, session_id)
        except NotFound:
            continue
        found[session_id] = str(record.agent.get("id"))
    return found


def _counters(line: UsageLine) -> dict[str, Any]:
    return {**line.row.counters, "active_seconds": line.row.active_seconds}


def _summed(lines: list[UsageLine]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    for line in lines:
        total = accounting.added(total, _counters(line))
    return total


def _grouped(lines: list[UsageLine], group: str) -> list[dict[str, Any]]:
    totals: dict[str, dict[str, Any]] = {}
    for line in lines:
        key = KEYS[group](line)
        totals[key] = accounting.added(totals.get(key, {}), _counters(line))
    return [{group: key, **accounting.report(totals[key])} for key in sorted(totals)]


COLUMNS = ("requests", "input", "output", "cache read", "cache write", "list cost", "active s")


def _cells(amounts: dict[str, Any]) -> list[str]:
    writes = amounts["cache_creation"]
    cents = int(amounts["list_cost"]["amount"])
    return [
        f"{amounts['requests']:,}",
        f"{amounts['input_tokens']:,}",
        f"{amounts['output_tokens']:,}",
        f"{amounts['cache_read_input_tokens']:,}",
        f"{writes['ephemeral_5m_input_tokens'] + writes['ephemeral_1h_input_tokens']:,}",
        f"${cents // 100}.{cents % 100:02d}",
        f"{amounts['active_seconds']:,.1f}",
    ]


def _table(group: str, rows: list[dict[str, Any]], total: dict[str, Any]) -> Table:
    from rich.table import Table

    table = Table(title=f"by {group}", title_justify="left", show_footer=bool(rows))
    # Ids are never cut: they are what the API and the other commands take.
    table.add_column(group, footer="total", no_wrap=True, overflow="fold")
    for name, cell in zip(COLUMNS, _cells(total), strict=True):
        table.add_column(name, footer=cell, justify="right")
    for row in rows:
        table.add_row(str(row[group]), *_cells(row))
    return table
