"""The three run profiles every notebook and command accepts.

smoke: seconds per notebook (tests); quick: the whole study in about 20 minutes on a
2-core CPU; paper: the seeds' settings (hours; results are cached and shipped).
"""

from __future__ import annotations

from typing import Any

from structattn_lite.validation import check_choice

PROFILES = ("smoke", "quick", "paper")


def check_profile(profile: str) -> str:
    return check_choice("profile", profile, PROFILES)


def pick(profile: str, table: dict[str, Any]) -> Any:
    """The entry of a per-profile settings table, with a clear error for a bad name."""
    check_profile(profile)
    return table[profile]
