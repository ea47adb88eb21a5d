"""The README's findings, rendered from the committed results of every study.

``render()`` builds the section from ``data/results``; ``structattn findings --write``
puts it into README.md between two markers, and a test fails when the README's copy
differs from what the committed tables say, so a re-run cannot leave stale numbers.
"""

from __future__ import annotations

import re

from structattn_lite.config import repo_root

START, END = "<!-- findings:start -->", "<!-- findings:end -->"


def _section(heading: str, bullets: list[str]) -> str:
    """A finding: its bold heading, then one bullet per kind of result."""
    return f"**{heading}**\n\n" + "\n".join(f"- {b}" for b in bullets)


def _grokking() -> str:
    from structattn_lite.studies.grokking import experiment, report

    records = experiment.committed_records()
    if not records:
        return "**CSP grokking (notebook 03).** No committed grid."
    table = report.grokking_table(records)
    cells = "; ".join(
        f"{r.task}/`{r.preset}`: {r.seeds_at_100}/{r.seeds} seeds at 100%, gap {r.gap_ours} "
        f"vs paper {r.gap_paper}"
        for r in table.itertuples()
    )
    return f"**CSP grokking (notebook 03, committed grid).** {cells}."


def _grokking_gap() -> str:
    from structattn_lite.studies.grokking import experiment, report

    records = experiment.committed_records("gap")
    if not records:
        return "**Grokking gap at the paper's sizes (notebook 03, grid `gap`).** Not committed yet."
    table = report.grokking_table(records)
    cells = [
        f"{r.task}/`{r.preset}`: {r.seeds_at_100}/{r.seeds} seeds at 100%, gap "
        f"{r.gap_ours} vs paper {r.gap_paper}, {r.verdict}; spike at the jump {r.spike_at_jump}."
        for r in table.itertuples()
    ]
    configs = [r.config for r in records]
    n = ", ".join(f"{t} {n}" for t, n in dict.fromkeys((c["task"], c["n"]) for c in configs))
    seeds = sorted({c["seed"] for c in configs})
    grid = (
        f"{len(records)} runs, seeds {seeds} per task and preset, up to "
        f"{max(c['epochs'] for c in configs)} epochs, strings: {n}, "
        f"stopped after {configs[0]['hold_perfect']} epochs at 100% validation accuracy"
    )
    return _section(
        "Grokking gap at the paper's sizes (notebook 03, grid `gap`; whole-string test "
        "accuracy, early stop on validation only).",
        [*cells, f"Grid: {grid}."],
    )


def _paper_era() -> str:
    from structattn_lite.studies.grokking import experiment, report

    records = experiment.committed_records("paper_era")
    if not records:
        return "**The paper-era model (notebook 03, grid `paper_era`).** Not committed yet."
    summary = report.jump_findings(records).split("\n\n")[0]
    return (
        "**The authors' paper-era model (befce39) under the paper-text protocol (notebook 03, "
        f"grid `paper_era`, {len(records)} seeds).** {summary}"
    )


def _attention() -> str:
    from structattn_lite.studies.attention import report, verdicts
    from structattn_lite.studies.attention.grids import GRIDS
    from structattn_lite.studies.attention.tuning_report import (
        best_known,
        edge_check_verdict,
        load_first_sweep,
        rate_transfer_table,
        rate_transfer_verdict,
    )

    summary = report.load_summary()
    if summary is None:
        return "**Attention (notebook 02).** No committed grid yet."

    def cells(which: str, column: str = "test bpc") -> str:
        table = report.measurement_table(summary, which)
        return "; ".join(f"{r['variant']} {r[column]}" for _, r in table.iterrows()) or "no runs"

    def low_data(runs) -> str:  # the verdict against each rival, with its smallest fraction's edge
        edges = verdicts.low_data_edges(runs)
        if not edges:
            return "not tested (one fraction of the text)"
        words = []
        for rival, (verdict, res) in edges.items():
            f, (d, lo, hi, n) = next(iter(res.items()))
            words.append(f"against {rival} {verdict} ({d:+.3f} [{lo:+.3f}, {hi:+.3f}] at {f:.0%} of the text, n={n})")  # fmt: skip
        return "; ".join(words)

    first = load_first_sweep()
    contrasts = [f"Contrasts at the committed rates: {'; '.join(verdicts.contrasts(summary))}."]
    precision = (
        f"Under bfloat16 autocast: {cells('stability')}. "
        f"{verdicts.precision_verdict(summary).rstrip('.')}."
    )
    low = [f"at the committed rates: {low_data(summary)}"]
    rates = edge_check_verdict(summary, GRIDS["committed"]["lrs"])
    if first is not None:
        rates += " " + rate_transfer_verdict(rate_transfer_table(first, summary), summary)
        best = best_known(first, summary)
        picked = best.groupby("variant", sort=False)["lr"].first()
        contrasts.append(
            "Contrasts with each variant at the better of its two full-budget rates on "
            "validation ("
            + ", ".join(f"{v} {lr:g}" for v, lr in picked.items())
            + "): "
            + "; ".join(verdicts.contrasts(best))
            + "."
        )
        low_best = best_known(first, summary, parts=("main", "low data"))
        low += [
            f"at each variant's better rate on validation, fraction by fraction: {low_data(low_best)}",
            f"at the first sweep's rate (every variant at 0.006): {low_data(first)}",
        ]
        precision += f" At the first sweep's rate, {verdicts.precision_verdict(first).rstrip('.')}."
    bullets = [
        f"Final runs, per variant: {cells('main')}.",
        *contrasts,
        "Low-data hypothesis (matroidal m=2d's edge in test bpc at the smallest fraction of "
        "the text against its edge on all of it; 95% Welch t over seeds):"
        + "".join(f"\n  - {line}." for line in low),
        precision,
        f"Digits (test accuracy): {cells('digits', 'test acc')}.",
        f"Learning rates: {rates}",
        f"Grid: {report.grid_caption(summary, GRIDS['committed']['lrs'])}.",
    ]
    return _section(
        "Attention (notebook 02, committed grid; test bits per character, mean ± 95% t "
        "interval over seeds).",
        bullets,
    )


def _attention_long() -> str:
    from structattn_lite.studies.attention import report, tuning_report
    from structattn_lite.studies.attention.grids import RECIPE_TARGET_BPC

    heading = "Attention at a longer budget (notebook 02, grid `long`; test bits per character)."
    sweeps = {"current": "at the rates the committed grid chooses now",
              "first": "at the first sweep's rate (every variant at 0.006)"}  # fmt: skip
    summaries = {s: report.load_summary("long", sweep=s) for s in sweeps}
    committed = report.load_summary("committed")
    bullets = []
    for sweep, words in sweeps.items():
        summary = summaries[sweep]
        if summary is None:
            continue
        main = report.measurement_table(summary, "main")
        cells = "; ".join(f"{r['variant']} {r['test bpc']}" for _, r in main.iterrows())
        budget = report.budget_table(report.load_committed_histories("long", sweep))
        reached = [
            f"seed {r['seed']} at step {r[f'step at <= {RECIPE_TARGET_BPC} val bpc']} after {r['core-minutes then']} core-minutes"
            if r["core-minutes then"] != "" else f"seed {r['seed']} not within {r['steps']} steps (best {r['best val bpc']})"
            for _, r in budget[budget["variant"] == "dot"].iterrows()
        ]  # fmt: skip
        drift = report.rate_drift(summary, committed) if sweep == "current" else ""
        bullets.append(
            f"{words.capitalize()}: {cells}. Dot product at or below {RECIPE_TARGET_BPC} "
            f"validation bpc (the recipe's target on these machines): "
            f"{'; '.join(reached) or 'no dot run'}. Grid: {report.grid_caption(summary)}. "
            f"{drift}".rstrip()
        )
    if not bullets:
        return f"**{heading}** Not committed yet."
    if all(s is not None for s in summaries.values()):
        table = tuning_report.rate_transfer_table(summaries["first"], summaries["current"])
        bullets.append(tuning_report.rate_transfer_verdict(table, summaries["current"]))
    return _section(heading, bullets)


def _ablations() -> str:
    from structattn_lite.studies.ablations import report
    from structattn_lite.studies.ablations.experiment import COMMITTED_CSV

    results = report.load_results()
    text = f"**Ablations (notebook 04).** {report.findings(results)['summary']} " + (
        f"Grid: {report.grid_caption(results)}."
    )
    paper_text = report.load_results(COMMITTED_CSV["paper_text"], missing_ok=True)
    if paper_text is not None:
        prose = report.table3_findings(paper_text).replace("**Read from the table.**\n\n", "")
        text += (
            "\n\n**Table 3 at the paper's size (notebook 04, the text's model).** "
            + " ".join(prose.removeprefix("- ").replace("\n- ", " ").split())
            + f" Grid: {report.grid_caption(paper_text)}."
        )
    return text


def _length() -> str:
    from structattn_lite.studies.length import report

    curves = report.load_curves()
    fixed = curves[curves["protocol"] == "fixed"]
    parts = []
    for task in ("parity", "mod3", "dyck1"):
        held = [
            m
            for m in dict.fromkeys(fixed[fixed["task"] == task]["model"])
            if (r := report.reach(curves, task, "fixed", m))["holds"] == r["longest"]
        ]
        longest = int(fixed["length"].max())
        parts.append(f"{task}: {', '.join(held) or 'no model'} up to L = {longest}")
    fit = report.findings(curves).get("fit", "").replace("**", "")
    bullets = [
        f"Models that hold whole-string accuracy ≥ {report.HOLDS} from their training length "
        f"to the longest length: {'; '.join(parts)}.",
        *([fit] if fit else []),
        f"Grid: {report.length_caption(curves)}.",
    ]
    return _section("Length generalization (notebook 05, fixed protocol).", bullets)


def _authors() -> str:
    from structattn_lite.studies.length import authors, report

    for grid in ("authors", "authors_short"):
        curves = report.load_curves(grid)
        if not curves.empty:
            break
    else:
        return "**The authors' own length table (notebook 05).** No committed grid yet."
    table = authors.authors_table(curves)
    theirs = "authors' README"
    by_task: dict[str, list[str]] = {}
    for (task, length), row in table.iterrows():
        by_task.setdefault(task, []).append(
            f"L = {length}: ours {row['ours, all positions']} vs theirs {row[theirs]} "
            f"({row['verdict']})"
        )
    return _section(
        f"The authors' own model and protocol (notebook 05, grid `{grid}`), all positions, "
        "mean ± 95% CI over seeds.",
        [
            *(f"{task}: {'; '.join(rows)}." for task, rows in by_task.items()),
            f"Grid: {report.length_caption(curves)}.",
        ],
    )


def render() -> str:
    """The findings section, from the committed tables."""
    parts = [
        _attention(),
        _attention_long(),
        _grokking(),
        _paper_era(),
        _grokking_gap(),
        _ablations(),
        _length(),
    ]
    return "\n\n".join([*parts, _authors()])


def readme_section(text: str | None = None) -> str:
    """The findings currently in README.md (between the markers)."""
    text = text if text is not None else (repo_root() / "README.md").read_text()
    match = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if not match:
        raise ValueError(f"README.md has no {START} ... {END} section")
    return match.group(1)


def write_readme() -> None:
    path = repo_root() / "README.md"
    text = path.read_text()
    old = readme_section(text)
    path.write_text(text.replace(f"{START}\n{old}\n{END}", f"{START}\n{render()}\n{END}"))
