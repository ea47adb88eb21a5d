"""figures/ is what data/results renders, byte for byte, and nothing else.

Every figure of ``committed_figures.FIGURES`` is drawn from the committed records into a
scratch folder and compared with the file in the checkout's figures/; the test names the
stale files (``structattn figures`` redraws them). figures/ may hold nothing else but the
findings figures (``findings.write_figures``).
"""

from __future__ import annotations

import pytest

from structattn_lite import committed_figures, names, report
from structattn_lite.config import repo_root

FIGURES = repo_root() / "figures"  # the checkout's, not $STRUCTATTN_FIGURES


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """``structattn figures`` run into a scratch folder holding one stray file: the files
    it leaves there."""
    from structattn_lite import cli

    out = tmp_path_factory.mktemp("figures")
    (out / "02_attention_learning_curves.png").write_bytes(b"a quick-profile figure")
    # drawn there by an earlier `structattn figures` (it removes only what it drew)
    (out / committed_figures.MANIFEST).write_text('["02_attention_learning_curves.png"]')
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRUCTATTN_FIGURES", str(out))
        assert cli.main(["figures"]) == 0
    return out, sorted(p for p in out.iterdir() if p.name != committed_figures.MANIFEST)


def test_figures_command_draws_every_committed_figure(rendered):
    _, written = rendered
    stems = {p.name.split(".")[0] for p in written}
    assert stems == set(committed_figures.FIGURES), stems ^ set(committed_figures.FIGURES)
    assert "02_attention_learning_curves.png" not in {p.name for p in written}  # removed


def test_every_committed_figure_matches_its_records(rendered):
    _, written = rendered
    missing = sorted(p.name for p in written if not (FIGURES / p.name).exists())
    stale = sorted(
        p.name
        for p in written
        if (FIGURES / p.name).exists() and (FIGURES / p.name).read_bytes() != p.read_bytes()
    )
    assert not missing and not stale, (
        f"figures/ is not what data/results renders: stale {stale}, missing {missing}; "
        "run `structattn figures` and commit figures/"
    )


def test_figures_holds_only_committed_renders(rendered):
    _, written = rendered
    extra = [p.name for p in committed_figures.stray(FIGURES, written)]
    assert not extra, (
        f"figures/ holds files no committed record draws: {extra}; a profile's own figures "
        "go to reports/<profile>/ (`structattn figures` removes these)"
    )


def test_rendering_twice_gives_the_same_bytes(rendered, tmp_path):
    """No timestamp or other per-run state in the files: a second render is identical."""
    out, _ = rendered
    name = "04_ablations_table3_paper_text"  # a table: HTML, PNG and PDF
    committed_figures.save(name, tmp_path)
    for path in sorted(tmp_path.iterdir()):
        assert path.read_bytes() == (out / path.name).read_bytes(), path.name


def test_unknown_names_and_missing_profiles_are_errors():
    from matplotlib.figure import Figure

    with pytest.raises(ValueError, match="no committed figure 'nope'"):
        committed_figures.draw("nope")
    with pytest.raises(ValueError, match="needs profile="):
        report.save_figure(Figure(), "x", "y")
    with pytest.raises(ValueError, match="no_such_model' has no entry in names"):
        report.model_style("no_such_model")


def test_profile_figures_go_under_reports(monkeypatch, tmp_path):
    from structattn_lite.config import figures_dir

    monkeypatch.setenv("STRUCTATTN_FIGURES", str(tmp_path / "figures"))
    assert figures_dir() == figures_dir("committed") == tmp_path / "figures"
    for profile in ("smoke", "quick", "paper"):
        assert figures_dir(profile) == tmp_path / "reports" / profile
    with pytest.raises(ValueError, match="profile='long'"):
        figures_dir("long")


def test_every_model_in_the_records_has_one_style():
    """Each attention variant and CSP model or preset the records name has a display
    name, colour and marker; a preset and the length study's model of it share one."""
    import pandas as pd

    from structattn_lite.config import results_dir
    from structattn_lite.studies.grokking.experiment import committed_records

    results = results_dir()
    names = set(pd.read_csv(results / "attention_runs.csv")["variant"])
    for grid in ("gap", "paper_era"):
        names |= {r.config["preset"] or r.config["model"] for r in committed_records(grid)}
    for csv in ("length_generalization.csv.gz", "length_authors.csv.gz"):
        names |= set(pd.read_csv(results / csv)["model"])
    for name in sorted(names):
        style = report.model_style(name)
        assert {"name", "color", "marker", "ls"} <= set(style), name
    assert report.model_style("paper") is report.model_style("csp_paper")
    assert report.model_style("authors_3bb9f71") is report.model_style("csp_authors")


def test_no_two_models_share_a_colour_and_none_is_grey():
    """The diagonal RNN [0, 1] and the authors' 7d6c56a were both pink, and two models
    the verdicts' "undecided" grey: each model now has a colour of its own, never grey,
    and the default cycle (seeds, supports) holds no grey either."""
    from matplotlib.colors import rgb_to_hsv, to_hex, to_rgb

    models = {}  # a preset shares its model's entry: one colour, counted once
    for name in names.ENTRIES:
        if names.ENTRIES[name].color is None:
            continue
        style = report.model_style(name)
        models.setdefault(id(style), (name, to_hex(style["color"])))
    owner: dict[str, str] = {}
    for name, colour in models.values():
        assert colour not in owner, f"{name} and {owner[colour]} share the colour {colour}"
        owner[colour] = name
        assert rgb_to_hsv(to_rgb(colour))[1] >= 0.25, f"{name}: {colour} is a grey"
    assert to_hex(report.VERDICT_COLOR["undecided"]) not in owner
    assert all(rgb_to_hsv(c)[1] >= 0.25 for c in report.PALETTE), "a grey in the cycle"
