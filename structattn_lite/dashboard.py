"""The teaching app: Voila over ``dashboards/``, and the table of controls each guide shows.

    python -m structattn_lite.dashboard dashboards --no-browser --port=8866

Takes Voila's own arguments (``make dashboard`` passes them), with four changes:

- nbclient's Output-widget echo is deferred (see
  ``notebook_runner.defer_output_widget_echo``): Voila executes each dashboard with nbclient
  and sets no cell timeout, so the stall it avoids would leave a page loading for good;
- ``/`` opens the folder's landing page, ``index.ipynb`` (one line per dashboard), not
  Voila's bare file list (that stays at ``/voila/tree``);
- the server asks for a token unless one is given (``--token=...``), as JupyterLab does:
  the URL it prints carries it;
- the kernel of a closed page is shut down once idle for ``CULL_IDLE_S`` seconds (Voila
  starts one per page view and kept each: 21 views held 16.8 GiB); a page still open keeps
  its kernel. ``--MappingKernelManager.cull_*`` arguments override these.
"""

from __future__ import annotations

import sys
from pathlib import Path

LANDING = "index.ipynb"
CULL_IDLE_S = 30  # a closed page's kernel lives this long once idle
CULL = {  # jupyter-server's culling of kernels no page is connected to
    "MappingKernelManager.cull_idle_timeout": CULL_IDLE_S,
    "MappingKernelManager.cull_interval": 10,
    "MappingKernelManager.cull_connected": False,
}


def controls(app) -> dict[str, tuple[list[str], str]]:
    """Every control in a widget tree, by its label, in page order: what it offers (the
    option labels, or a slider's range) and the value it opens on, as the page shows them."""
    import ipywidgets as W

    found, todo = {}, [app]
    while todo:
        w = todo.pop(0)
        todo[:0] = list(getattr(w, "children", ()))
        if not (isinstance(w, W.ValueWidget) and getattr(w, "description", "")):
            continue
        if hasattr(w, "_options_labels"):  # dropdowns and other selections
            found[w.description] = (list(w._options_labels), w.label)
        elif isinstance(w, W.FloatLogSlider):
            found[w.description] = ([f"{w.base**w.min:g} to {w.base**w.max:g}"], f"{w.value:g}")
        elif hasattr(w, "min") and hasattr(w, "max"):
            found[w.description] = ([f"{w.min} to {w.max}"], str(w.value))
        else:
            found[w.description] = ([], str(w.value))
    return found


def controls_table(app, what: dict[str, str]):
    """The guide's table of controls, read from the widgets themselves: each control's label,
    its options (or range) and the value the page opens on, beside ``what`` it does. Raises
    ``ValueError`` when ``what`` and the controls do not name the same labels, so a guide
    cannot describe a control the page lacks, or leave one out."""
    from IPython.display import Markdown

    found = controls(app)
    if set(what) != set(found):
        raise ValueError(
            f"the guide describes controls {sorted(what)} but the page has {sorted(found)}"
        )
    rows = ["| control | choices | opens on | what it does |", "|---|---|---|---|"]
    for label, (options, value) in found.items():
        choices = ", ".join(f"`{o}`" for o in options)
        rows.append(f"| **{label}** | {choices} | `{value}` | {what[label]} |")
    return Markdown("\n".join(rows))


def caption(text: str):
    """A caption as an HTML paragraph that wraps between words. Printed, it became a
    stream output, which JupyterLab and Voila show with ``word-break: break-all``: lines
    broke in the middle of a word."""
    import html

    from IPython.display import HTML

    style = "word-break: normal; overflow-wrap: normal; white-space: normal; max-width: 60em"
    return HTML(f'<p class="structattn-caption" style="{style}">{html.escape(text)}</p>')


def voila_args(args: list[str]) -> list[str]:
    """Voila's arguments: ``args``, with a generated token and the culling of closed
    pages' kernels (``CULL``) unless ``args`` set them."""
    args = list(args)
    if not any(a.startswith(("--token", "--Voila.token", "--Voila.auto_token")) for a in args):
        args.append("--token")  # Voila's flag for a generated token
    for name, value in CULL.items():
        if not any(a.startswith(f"--{name}") for a in args):
            args.append(f"--{name}={value}")
    return args


def main(argv: list[str] | None = None) -> int:
    from tornado.web import RedirectHandler
    from voila.app import Voila

    from structattn_lite.notebook_runner import defer_output_widget_echo

    class Dashboards(Voila):
        def init_handlers(self):
            handlers = super().init_handlers()
            if self.notebook_path or not (Path(self.root_dir) / LANDING).exists():
                return handlers
            landing = self.server_url.rstrip("/") + f"/voila/render/{LANDING}"
            return [(self.server_url, RedirectHandler, {"url": landing}), *handlers]

    args = voila_args(sys.argv[1:] if argv is None else argv)
    defer_output_widget_echo()
    sys.argv = ["voila", *args]
    return Dashboards.launch_instance() or 0


if __name__ == "__main__":
    sys.exit(main())
