"""Argument checks shared by every public entry point.

Each raises ``ValueError`` whose message names the parameter, the value it got and
what is allowed, so a notebook user can fix the call without reading the source.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def check_choice(param: str, value: Any, allowed: Iterable[Any]) -> Any:
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{param}={value!r} is not allowed; choose one of {allowed}")
    return value


def check_int(param: str, value: Any, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{param} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{param} must be >= {minimum}, got {value}")
    return value


def check_number(
    param: str, value: Any, *, minimum: float | None = None, strict: bool = False
) -> float:
    """A real number >= minimum (> minimum when ``strict``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{param} must be a number, got {value!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        op = ">" if strict else ">="
        raise ValueError(f"{param} must be {op} {minimum}, got {value}")
    return float(value)
