"""Execute the numbered notebooks with papermill and render them to HTML reports."""

from __future__ import annotations

from pathlib import Path

from structattn_lite.config import check_profile, repo_root


def notebooks(only: list[str] | None = None) -> list[Path]:
    found = sorted((repo_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if only:
        found = [p for p in found if any(p.name.startswith(o) for o in only)]
    return found


def run_notebooks(profile: str, only: list[str] | None = None) -> list[Path]:
    """Run each notebook in order with ``PROFILE=profile``; write reports/<name>.{ipynb,html}."""
    import nbformat
    import papermill as pm
    from nbconvert import HTMLExporter

    check_profile(profile)
    reports = repo_root() / "reports"
    reports.mkdir(exist_ok=True)
    written = []
    for nb in notebooks(only):
        out = reports / nb.name
        print(f"[study] {nb.name} (profile={profile})", flush=True)
        pm.execute_notebook(
            nb, out, parameters={"PROFILE": profile}, cwd=nb.parent, progress_bar=False
        )
        html, _ = HTMLExporter().from_notebook_node(nbformat.read(out, as_version=4))
        out.with_suffix(".html").write_text(html)
        written.append(out.with_suffix(".html"))
    return written
