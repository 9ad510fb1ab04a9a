"""Bodies of stead's limits routes (``/v1/stead/.../limits``): what an operator
sets, and their wire form.

A field left out stays as it is, ``null`` clears the limit, a number sets it.
Spend is the spec's money shape (``{"amount": "<cents>", "currency": "USD"}``,
as a session's budget), kept in the store as nanodollars like the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stead.jsonvalues import Json
from stead.schemas.validation import RequestError
from stead.usage import NANOS_PER_CENT

MAX_LIMIT = 2**53
"""Largest count accepted (exact in every JSON reader)."""
MAX_CENTS = 10**11
"""Largest spend limit: a billion dollars (in nanodollars it still fits 63 bits)."""
WORKSPACE_FIELDS = {
    "monthly_tokens": "monthly_tokens",
    "monthly_list_cost": "monthly_list_cost_nanos",
    "monthly_sandbox_seconds": "monthly_sandbox_seconds",
    "concurrent_sandboxes": "concurrent_sandboxes",
    "file_storage_bytes": "file_storage_bytes",
}
"""Wire field -> the store's limit name."""
ENVIRONMENT_FIELDS = {"session_sandbox_seconds": "session_sandbox_seconds"}


def _count(field: str, value: Any, most: int = MAX_LIMIT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise RequestError(f"{field}: must be null or a whole number from 0 to {most}")
    return value


def _cost(field: str, value: Any) -> int:
    if not isinstance(value, dict) or set(value) != {"amount", "currency"}:
        raise RequestError(f"{field}: must be null or {{amount, currency}}")
    if value["currency"] != "USD":
        raise RequestError(f"{field}.currency: must be 'USD'")
    amount = value["amount"]
    if not isinstance(amount, str) or not amount.isascii() or not amount.isdigit():
        raise RequestError(f"{field}.amount: must be a string of whole US cents, e.g. '2500'")
    cents = int(amount) if len(amount) <= 17 else MAX_CENTS + 1
    return _count(f"{field}.amount", cents, MAX_CENTS) * NANOS_PER_CENT


def changes(body: Any, fields: Mapping[str, str]) -> dict[str, int | None]:
    """The store's changes from a request body over ``fields``."""
    if not isinstance(body, dict):
        raise RequestError("body: must be a JSON object")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise RequestError(f"{unknown[0][:80]}: unknown limit; one of {', '.join(fields)}")
    found: dict[str, int | None] = {}
    for field, value in body.items():
        if value is None:
            found[fields[field]] = None
        elif field == "monthly_list_cost":
            found[fields[field]] = _cost(field, value)
        else:
            found[fields[field]] = _count(field, value)
    return found


def wire(limits: Mapping[str, int], fields: Mapping[str, str]) -> Json:
    """Every field of ``fields``, null where no limit is set."""
    body: Json = {}
    for field, name in fields.items():
        value = limits.get(name)
        if value is not None and field == "monthly_list_cost":
            body[field] = {"amount": str(value // NANOS_PER_CENT), "currency": "USD"}
        else:
            body[field] = value
    return body
