"""What every study shares when it shows results: the figure file format, mean ± sd,
and the live training plot a notebook can hang on a sweep.
"""

from __future__ import annotations

import math
import re
import textwrap
import threading
from pathlib import Path

import ipywidgets as widgets
import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from cycler import cycler
from IPython.display import display
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from structattn_lite import files, names, stats
from structattn_lite.config import COMMITTED, Callback, check_choice, figures_dir, results_dir

# --- figure style: one look for every figure, drawn at the size it is printed ---------
#
# Widths of a two-column paper: a figure is drawn one column or the full text wide, so
# its fonts are the sizes they print at. Colours: seaborn's colour-blind-safe palette;
# line styles and markers vary with the colour, so coinciding lines stay distinguishable.
ONE_COLUMN = 3.4  # inches
TWO_COLUMN = 7.0  # inches
PAGE_HEIGHT = 9.0  # inches of text on a page: no figure is taller
# Grey is the "undecided" verdict's colour (VERDICT_COLOR): no line of the default cycle
# (a seed, a support) and no model takes it, so the palette's grey is left out.
PALETTE = [c for c in sns.color_palette("colorblind") if len(set(c)) > 1]
STYLE = {
    "axes.prop_cycle": cycler(color=PALETTE),
    "image.cmap": "viridis",
    "font.size": 8,
    "axes.titlesize": 8,
    "axes.labelsize": 8,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "legend.fontsize": 7,
    "figure.titlesize": 9,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "figure.dpi": 110,  # on screen; saved figures use SAVE_DPI
}
SAVE_DPI = 200


def use_style() -> None:
    """Apply ``STYLE`` to matplotlib (done when this module is imported)."""
    matplotlib.rcParams.update(STYLE)


def figure_size(columns: int = 2, height: float | None = None) -> tuple[float, float]:
    """(width, height) in inches of a figure one or two columns wide; the height
    defaults to 0.62 of the width."""
    check_choice("columns", columns, (1, 2))
    width = ONE_COLUMN if columns == 1 else TWO_COLUMN
    return width, round(width * 0.62, 2) if height is None else height


use_style()


def model_style(name: str) -> dict:
    """A model's or variant's display ``name``, ``color``, ``ls`` and ``marker``
    (``names.style``); a model without an entry there is an error, not a colour by
    position."""
    return names.style(name)


def model_handles(models) -> list[Line2D]:
    """A legend entry per model: its display name, colour, dash and marker."""
    return [Line2D([], [], lw=1, color=st["color"], ls=st["ls"], marker=st["marker"],
                   label=st["name"]) for st in map(model_style, models)]  # fmt: skip


def seed_band(values: pd.Series, by: pd.Series) -> tuple[pd.Series, pd.Series, pd.Series]:
    """The mean over seeds of ``values`` at each value of ``by`` (an evaluation length, an
    epoch) and its 95% t band, clipped to [0, 1]: the interval the ledger gives a mean of
    accuracies (``stats.mean_interval``), drawn the same in every figure. A point with one
    seed has no band (low = high = the mean)."""
    rows = {x: stats.mean_interval(v.tolist(), bounds=stats.UNIT) for x, v in values.groupby(by)}
    frame = pd.DataFrame(rows, index=["mean", "low", "high", "n"]).T
    low, high = frame["low"].fillna(frame["mean"]), frame["high"].fillna(frame["mean"])
    return frame["mean"], low, high


BAND = "lines: mean over seeds; bands: 95% t interval over seeds"  # what every band is


def length_panel(ax, curves: pd.DataFrame, metric: str, *, models=None,
                 trained_to: float | None = None, published: dict | None = None,
                 ylim=(-0.02, 1.04)) -> None:  # fmt: skip
    """Accuracy against evaluation length on one panel, the one way every figure draws it:
    per model (``curves``' "model", in ``models``' order) its mean over seeds with the 95%
    t band (``seed_band``), in its colour, dash and marker from names.py; a dotted line at
    the training length ``trained_to``; ``published`` ({label: (lengths, values)}) as
    black points; lengths on a log2 axis. Say ``BAND`` on the figure."""
    for model in models or list(dict.fromkeys(curves["model"])):
        runs = curves[curves["model"] == model]
        if runs.empty:
            continue
        mean, low, high = seed_band(runs[metric], runs["length"])
        style = model_style(model)
        ax.plot(mean.index, mean.values, color=style["color"], ls=style["ls"],
                marker=style["marker"], markevery=0.12, ms=3, lw=1, label=style["name"])  # fmt: skip
        ax.fill_between(mean.index, low, high, color=style["color"], alpha=0.15, lw=0)
    if trained_to is not None:
        ax.axvline(trained_to, color="grey", ls=":", lw=1)
    for label, (lengths, values) in (published or {}).items():
        ax.plot(lengths, values, "o", color="black", ms=3.5, label=label)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="evaluation length L", ylim=ylim)


def count_range(counts: pd.Series) -> str:
    """The range of ``counts`` (seeds per cell, say): "5" when all are 5, else "3-5"."""
    low, high = counts.min(), counts.max()
    return f"{low}" if low == high else f"{low}-{high}"


def in_words(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` as a reader sees it: each code key in a key column (``names.COLUMNS``, in
    the index or among the columns) shown as its display name, and "preset" headed
    "model". A value already in words passes; any other unregistered value is an error
    (``names.entry``), never shown as a code key."""
    shown = set(names.DISPLAY_NAMES.values())

    def word(value):
        if not isinstance(value, str) or value in shown and value not in names.ENTRIES:
            return value
        return names.display_name(value)

    out = table.copy()
    for column in [c for c in out.columns if c in names.COLUMNS]:
        out[column] = out[column].map(word)
    for level in [n for n in out.index.names if n in names.COLUMNS]:
        out = out.rename(index=word, level=level)
    return out.rename_axis(index=[names.COLUMNS.get(n, n) for n in out.index.names]).rename(
        columns={c: names.COLUMNS[c] for c in out.columns if c in names.COLUMNS}
    )


# Fixed metadata so re-rendering the same figure gives the same bytes.
_PNG_META = {"Software": None}
_PDF_META = {"Creator": None, "Producer": None, "CreationDate": None}


def save_figure(
    fig: matplotlib.figure.Figure,
    notebook: str,
    name: str,
    profile: str | None = None,
    corpus: str | None = None,
    out: Path | None = None,
    pdf: bool = True,
    from_runs: bool = True,
) -> list[Path]:
    """Write ``<notebook>_<name>.png`` and ``.pdf`` into ``out``, else the folder of
    ``profile`` (``config.figures_dir``); returns the paths. A smoke-profile figure, or one
    drawn from a stand-in corpus (anything but ``"ptb"``), says so in its title; a figure
    that depends on no run, profile or corpus (``from_runs=False``: the theory notebook's)
    is never stamped, whatever profile names its folder."""
    stand_in = corpus not in (None, "ptb")
    if out is None:
        if profile is None:
            raise ValueError(
                f"save_figure({notebook!r}, {name!r}) needs profile= (a profile, or "
                f"{COMMITTED!r} for a render of data/results) or out="
            )
        if profile == COMMITTED and stand_in:
            raise ValueError(f"a committed figure is drawn from data/results, not {corpus!r}")
        out = figures_dir(profile)
    if from_runs and (profile == "smoke" or stand_in):
        stamp = f"[scratch: profile {profile}, corpus {corpus or 'n/a'}]"
        if fig.get_suptitle():  # the figure's own title stays; the stamp goes below it all
            fig.text(0.01, 0.0, stamp, fontsize=7, color="#b00", ha="left", va="top")
        else:
            fig.suptitle(stamp, fontsize=7, color="#b00", y=1.02)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{notebook}_{name}"
    png = stem.with_suffix(".png")
    # each file drawn in memory, then moved into place whole (files.write_bytes)
    files.write_bytes(png, figure_bytes(fig, "png"))
    if not pdf:
        return [png]
    files.write_bytes(stem.with_suffix(".pdf"), figure_bytes(fig, "pdf"))
    return [png, stem.with_suffix(".pdf")]


# --- the ledger's words: every verdict a table shows is read from claims.csv by row id ---
NO_ROW = "–"  # what a table shows for a cell the committed ledger has no row for


def ledger_rows() -> pd.DataFrame:
    """The committed ledger (``data/results/claims.csv``, under ``STRUCTATTN_RESULTS``),
    indexed by row id: what notebook tables read verdicts, intervals, seed counts and
    reasons from, never recomputing them (an empty table when the file is missing)."""
    path = results_dir() / "claims.csv"
    if not path.exists():
        return pd.DataFrame(columns=["verdict", "reason", "ours", "low", "high", "seeds"])
    return pd.read_csv(path).set_index("id")


def ledger_interval(row: pd.Series) -> str:
    """A ledger row's number as its tables print it: "0.996 [0.993, 0.998] (10 seeds)";
    a row with no number says why, in the first clause of its reason ("no value: 5 of 5
    seeds diverged (non-finite loss)")."""
    if pd.isna(row["ours"]):
        why = str(row.get("reason", "")).split(";")[0].strip()
        return f"no value: {why}" if why else f"no value ({row['seeds']} seeds)"
    interval = "" if pd.isna(row["low"]) else f" [{row['low']:.3f}, {row['high']:.3f}]"
    return f"{row['ours']:.3f}{interval} ({row['seeds']} seeds)"


def figure_bytes(fig: matplotlib.figure.Figure, fmt: str) -> bytes:
    """The bytes of ``fig`` as ``save_figure`` writes it in ``fmt`` ("png" or "pdf")."""
    check_choice("fmt", fmt, ("png", "pdf"))
    # a small pad: the saved file stays within the column the figure was drawn for
    options = {"bbox_inches": "tight", "pad_inches": 0.02}
    if fmt == "png":
        return files.figure_bytes(fig, "png", dpi=SAVE_DPI, metadata=_PNG_META, **options)
    return files.figure_bytes(fig, "pdf", metadata=_PDF_META, **options)


# One colour per verdict of the ledger's vocabulary (stats.VERDICTS), in every figure.
VERDICT_COLOR = {"reproduced": "#1b7837", "not reproduced": "#b2182b", "undecided": "#878787"}


def plot_ours(ax, at: float, row, *, vertical: bool = False, hollow: bool = False, **style):
    """One ledger row's number of ours and its 95% interval (``row``'s ``ours``, ``low``,
    ``high``), coloured by its verdict, at ``at`` on the other axis (a y position; an x
    position with ``vertical``); ``hollow``: an open marker. The one way every figure draws
    "ours" against what a claim needs; ``style`` overrides the marker, sizes or label."""
    color = VERDICT_COLOR.get(row["verdict"], VERDICT_COLOR["undecided"])
    ours = row["ours"]
    err = [[ours - row["low"]], [row["high"] - ours]]
    kw = {"fmt": "o", "ms": 3, "lw": 1, "color": color, "mfc": "white" if hollow else color}
    if vertical:
        return ax.errorbar([at], [ours], yerr=err, **{**kw, **style})
    return ax.errorbar([ours], [at], xerr=err, **{**kw, **style})


def _verdict_color(value) -> str:
    """A table cell's tint: its verdict's ``VERDICT_COLOR``, a fifth of the way from white
    (a cell whose words do not start with a verdict is left plain)."""
    text = str(value)
    verdict = next((v for v in VERDICT_COLOR if text.startswith(v)), None)
    if verdict is None:
        return ""
    tint = [1 - 0.2 * (1 - c) for c in matplotlib.colors.to_rgb(VERDICT_COLOR[verdict])]
    return f"background-color: {matplotlib.colors.to_hex(tint)}"


def style(display: pd.DataFrame, caption: str = ""):
    """A pandas Styler that colours the verdict cells."""
    verdict_cols = [
        c for c in display.columns if (c[-1] if isinstance(c, tuple) else c) == "verdict"
    ]
    return display.style.map(_verdict_color, subset=verdict_cols).set_caption(caption)


def save_table(
    display: pd.DataFrame,
    notebook: str,
    name: str,
    caption: str = "",
    profile: str | None = None,
    out: Path | None = None,
) -> list[Path]:
    """Write the table as HTML (styled) and PNG/PDF (a matplotlib table) where
    ``save_figure`` writes them."""
    paths = save_figure(table_figure(display, caption), notebook, name, profile, out=out)
    html = paths[0].with_suffix(".html")
    files.write_text(html, style(display, caption).set_uuid(f"{notebook}_{name}").to_html())
    return [html, *paths]


WRAP, WRAP_SENTENCES = 16, 34  # characters per line in a table figure's cells


def _cell_text(value, wrap: int = WRAP) -> str:
    """A parenthetical on its own line ("0.50 ± 0.04\n(3 seeds)"); long lines wrapped, never
    inside brackets ("[0, 1]" stays whole)."""
    text = f"{value:.3f}" if isinstance(value, float) else str(value)
    text = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(" ", "\N{NO-BREAK SPACE}"), text)
    parts = text.replace(" (", "\n(").split("\n")
    return "\n".join(
        line.replace("\N{NO-BREAK SPACE}", " ")
        for p in parts
        for line in (textwrap.wrap(p, wrap, break_long_words=False) or [p])
    )


def table_figure(
    display: pd.DataFrame, caption: str = "", columns: int = 2, fontsize: float = 7.0
) -> Figure:
    """The table as a figure one or two columns wide, verdict cells coloured; a column of
    sentences wraps wider than one of numbers, and the font shrinks (to 4.5 pt at least)
    until the table fits the width and a page's height."""
    flat = display.reset_index()
    headers = [
        "\n".join(str(p) for p in c if p) if isinstance(c, tuple) else str(c) for c in flat.columns
    ]
    longest = [flat[c].astype(str).str.len().max() if len(flat) else 0 for c in flat.columns]
    wraps = [WRAP_SENTENCES if n > 3 * WRAP else WRAP for n in longest]
    text = [[_cell_text(v, w) for v, w in zip(row, wraps, strict=True)] for row in flat.values]
    lines = [max(s.count("\n") + 1 for s in row) for row in [headers, *text]]
    width = figure_size(columns)[0]

    def draw(size: float) -> tuple[Figure, float]:
        line, pad = size * 1.4 / 72, 0.06 * size / 7  # inches per text line, per row
        cap = textwrap.fill(caption, int(width * 72 / (size * 0.5))) if caption else ""
        cap_h = (cap.count("\n") + 1) * line + 0.1 if cap else 0.0
        body = sum(lines) * line + pad * len(lines)
        fig = Figure(figsize=(width, body + cap_h + 0.15))
        FigureCanvasAgg(fig)  # a renderer to measure the table with
        ax = fig.add_axes((0, 0, 1, 1 - cap_h / fig.get_figheight()))
        ax.axis("off")
        tab = ax.table(cellText=text, colLabels=headers, cellLoc="center", loc="upper center")
        tab.auto_set_font_size(False)
        tab.set_fontsize(size)
        tab.auto_set_column_width(list(range(len(headers))))
        axes_h = fig.get_figheight() - cap_h
        for (r, c), cell in tab.get_celld().items():
            cell.set_height((lines[r] * line + pad) / axes_h)
            cell.set_linewidth(0.4)
            if r > 0:
                color = _verdict_color(flat.iat[r - 1, c]).replace("background-color: ", "")
                if color:
                    cell.set_facecolor(color)
        if cap:
            fig.text(0.5, 1 - 0.05 / fig.get_figheight(), cap, ha="center", va="top", fontsize=size)
        fig.canvas.draw()
        too_tall = fig.get_figheight() / PAGE_HEIGHT
        return fig, max(tab.get_window_extent().width / fig.bbox.width, too_tall)

    fig, overflow = draw(fontsize)
    if overflow > 1:
        fig, _ = draw(max(4.5, fontsize / overflow * 0.98))
    return fig


class LivePlot(Callback):
    """A trainer callback that redraws loss and test accuracy after every epoch.

    ``display(live.widget)`` in a cell, then pass ``callbacks=[live]`` to a sweep.
    """

    def __init__(self, every: int = 1):
        self.widget = widgets.Output()
        self.every = every
        self.rows: list[dict] = []

    def on_epoch_end(self, trainer, row) -> None:
        if row["epoch"] == 1:
            self.rows = []  # a new run started
        self.rows.append(row)
        if row["epoch"] % self.every:
            return
        fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(9, 2.6))
        epochs = [r["epoch"] for r in self.rows]
        loss_ax.plot(epochs, [r["train_loss"] for r in self.rows])
        loss_ax.set(xlabel="epoch", ylabel="train loss", yscale="log")
        acc_ax.plot(epochs, [r.get("test_acc", float("nan")) for r in self.rows])
        acc_ax.set(xlabel="epoch", ylabel="test accuracy", ylim=(0, 1.02))
        fig.suptitle(f"{getattr(trainer, 'run_name', 'run')}, epoch {row['epoch']}", fontsize=10)
        fig.tight_layout()
        with self.widget:
            self.widget.clear_output(wait=True)
            display(fig)
        plt.close(fig)


def format_mean_sd(mean: float, sd: float, seeds: int, digits: int = 2) -> str:
    """The one way a mean over seeds is written: "0.97 ± 0.02 (3 seeds)"."""
    if seeds == 0 or math.isnan(mean):
        return "-"
    if seeds == 1:
        return f"{mean:.{digits}f} (1 seed)"
    return f"{mean:.{digits}f} ± {sd:.{digits}f} ({seeds} seeds)"


def grid_markdown(configs, title: str = "Grid") -> str:
    """A Markdown description of a list of run configs, read from the configs themselves:
    each setting with its one value, or the values it takes across the grid, as the code
    spans a reader would type. Notebooks print it in place of typed protocol prose, so a
    changed grid can never leave stale text.
    """
    import json

    from structattn_lite.records import config_dict

    flat = [pd_flatten(config_dict(c)) for c in configs]
    if not flat:
        return f"**{title}:** no runs."
    keys = sorted({k for f in flat for k in f})
    constant, varying = [], []
    for k in keys:
        values = sorted({json.dumps(f.get(k), sort_keys=True) for f in flat})
        shown = ", ".join("`" + v.strip('"') + "`" for v in values)
        (constant if len(values) == 1 else varying).append(f"`{k}` = {shown}")
    lines = [f"**{title}:** {len(configs)} runs."]
    if varying:
        lines.append("Varies across runs: " + "; ".join(varying) + ".")
    lines.append("Same in every run: " + "; ".join(constant) + ".")
    return "\n\n".join(lines)


def pd_flatten(blob: dict, prefix: str = "") -> dict:
    """``{"optim": {"lr": 1}}`` -> ``{"optim.lr": 1}``; empty dicts are kept as ``{}``."""
    out = {}
    for k, v in blob.items():
        if isinstance(v, dict) and v:
            out.update(pd_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# JupyterLab 4.6 with ipykernel 7 handles some widget messages on a kernel subshell thread,
# others on the main thread, and after each one the inline backend draws the pyplot
# figures that changed. matplotlib is not thread-safe (its mathtext parser fails with a
# ValueError), so a redraw holds this lock and, with interactive mode off, leaves no
# figure for another thread's inline backend to draw.
_DRAW_LOCK = threading.RLock()


# a browser's dropdowns whose values are code keys: a model, a task, a loss or a metric
NAMED_CONTROLS = ("model", "preset", "variant", "task", "loss", "metric")


def browser(
    sources: dict[str, object],
    choices,
    show,
    extra: dict[str, list] | None = None,
) -> widgets.Widget:
    """The one run-browser skeleton every notebook uses.

    ``sources`` maps a source name (this profile's runs, a committed grid) to its data;
    ``choices(data)`` gives, for that data, each dropdown's name and its values;
    ``show(data, **picked)`` draws the view for the picked values. ``extra`` adds
    dropdowns that do not depend on the source (e.g. a metric), in the caller's order,
    opening on the first. The others list their values sorted, tasks in the paper's order
    (``names.PAPER_TASKS``: parity first), so a browser opens on parity. A dropdown of
    models, tasks, losses or metrics (``NAMED_CONTROLS``) shows each one's display name
    (``names.DISPLAY_NAMES``) and passes its code key to ``show``. A control with a single
    value is a fact of the source, not a choice: its dropdown is hidden (it stays in the
    widget tree, disabled) and a label ``name: value`` stands in its place. Each dropdown is
    wide enough for its labels.
    """

    def ordered(name, values):  # each value once, sorted (by type first: a mixed list sorts)
        def key(v):
            if name == "task" and v in names.PAPER_TASKS:
                return (0, "", names.PAPER_TASKS.index(v))
            return (1, str(type(v)), v)

        return sorted(dict.fromkeys(values), key=key)

    def labelled(name, values):  # a named control's options: (display name, code key)
        if name not in NAMED_CONTROLS:
            return values
        return [(names.display_name(v) if isinstance(v, str) else str(v), v) for v in values]

    def dropdown(name, values):
        options = labelled(name, values)
        labels = [label for label, _ in options] if name in NAMED_CONTROLS else values
        width = f"{max([len(name), *(len(str(v)) for v in labels)]) + 12}ch"
        return widgets.Dropdown(
            options=options,
            description=name,
            layout=widgets.Layout(width=width),
            style={"description_width": "initial"},
        )

    shown = list(sources)  # sources keep the caller's order (the profile's runs first)
    source = widgets.Dropdown(
        options=shown,
        value=shown[0],
        description="source",
        layout=widgets.Layout(width=f"{max(map(len, shown)) + 14}ch"),
        style={"description_width": "initial"},
    )
    first = choices(sources[source.value])
    pickers = {name: dropdown(name, ordered(name, values)) for name, values in first.items()}
    facts = {name: widgets.Label() for name in pickers}  # stand in for a one-value dropdown

    def one_value_is_a_label(name):
        w, fact = pickers[name], facts[name]
        single = len(w.options) <= 1
        w.disabled = single
        w.layout.display = "none" if single else None
        fact.layout.display = None if single else "none"
        fact.value = f"{name}: {w.label}" if single and w.options else ""

    for name in pickers:
        one_value_is_a_label(name)
    fixed = {
        name: dropdown(name, list(dict.fromkeys(values))) for name, values in (extra or {}).items()
    }
    out = widgets.Output()

    def redraw(*_):
        with _DRAW_LOCK, plt.ioff():
            out.clear_output(wait=True)
            with out:
                picked = {n: w.value for n, w in {**pickers, **fixed}.items()}
                show(sources[source.value], **picked)

    def new_source(*_):
        for name, values in choices(sources[source.value]).items():
            w = pickers[name]
            values = ordered(name, values)
            keep = w.value if w.value in values else (values[0] if values else None)
            with w.hold_trait_notifications():
                w.options, w.value = labelled(name, values), keep
            one_value_is_a_label(name)
        redraw()

    source.observe(new_source, names="value")
    for w in (*pickers.values(), *fixed.values()):
        w.observe(redraw, names="value")
    redraw()
    # one source is a fact, not a choice: a label, not a dropdown with one option
    picker = source if len(shown) > 1 else widgets.Label(f"source: {shown[0]}")
    controls = [picker, *(w for n in pickers for w in (pickers[n], facts[n])), *fixed.values()]
    return widgets.VBox([widgets.HBox(controls, layout=widgets.Layout(flex_flow="row wrap")), out])
