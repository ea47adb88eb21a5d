"""Voila, launched with nbclient's Output-widget echo deferred (see
``notebook_runner.defer_output_widget_echo``): Voila executes each dashboard with nbclient
and sets no cell timeout, so the stall it avoids would leave a page loading for good.

    python -m structattn_lite.dashboard dashboards --no-browser --port=8866

Takes Voila's own arguments (``make dashboard`` passes them).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from voila.app import main as voila_main

    from structattn_lite.notebook_runner import defer_output_widget_echo

    defer_output_widget_echo()
    sys.argv = ["voila", *(sys.argv[1:] if argv is None else argv)]
    return voila_main() or 0


if __name__ == "__main__":
    sys.exit(main())
