"""The package's shape: layers below, studies above, no import circle, no study importing
another, and every notebook importing only its own study."""

import ast
import json
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "structattn_lite"
LAYERS = ("theory", "models", "data", "training")
NOTEBOOK_STUDY = {"02": "attention", "03": "grokking", "04": "ablations", "05": "length"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST) -> set[str]:
    """Every structattn_lite module a source imports, at any depth (lazy imports count)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("structattn_lite"):
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("structattn_lite"))
    return out


def import_graph() -> nx.DiGraph:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in imported(ast.parse(path.read_text())):
            if target in modules and target != name:
                graph.add_edge(name, target)
    return graph


def study_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "studies" else None


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    # a package's __init__ re-exporting its own submodules is not a circle of concepts
    edges = [(a, b) for a, b in graph.edges if not b.startswith(a + ".")]
    cycles = list(nx.simple_cycles(nx.DiGraph(edges)))
    assert not cycles, f"import circles: {cycles[:3]}"


def test_no_study_imports_another_and_no_layer_imports_a_study():
    for a, b in import_graph().edges:
        if study_of(b) is not None:
            assert study_of(a) in (None, study_of(b)), f"{a} imports another study: {b}"
            assert a.split(".")[1] not in LAYERS, f"layer module {a} imports study {b}"


def test_each_notebook_imports_only_its_own_study():
    for path in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        own = NOTEBOOK_STUDY.get(path.name[:2])
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        code = "\n".join(ln for ln in code.splitlines() if not ln.lstrip().startswith(("%", "!")))
        for target in imported(ast.parse(code)):
            study = study_of(target)
            assert study in (None, own), f"{path.name} imports another study: {target}"


def test_the_checker_sees_a_circle():
    graph = nx.DiGraph([("a", "b"), ("b", "a")])
    assert list(nx.simple_cycles(graph))


def test_the_briefs_public_names_are_there():
    from structattn_lite import attention, data, models, tasks, theory
    from structattn_lite.data.splits import make_dataset
    from structattn_lite.models.attention import build_attention

    assert attention.build_attention is build_attention and tasks.make_dataset is make_dataset
    assert callable(models.build_model) and callable(data.char_ptb)
    for name in ("incidence_matrix", "metric_matrix", "is_totally_unimodular", "tu_violation"):
        assert callable(getattr(theory, name)), name


def test_the_command_line_reaches_a_training_step_in_at_most_twelve_calls(tmp_path, monkeypatch):
    """Issue 25's path target, read off the stack at the first training step of
    ``structattn run grokking`` (package frames only)."""
    import traceback

    from structattn_lite import cli
    from structattn_lite.training.stacked_trainer import StackedTrainer

    class Reached(BaseException):  # past the sweep's guard, which records an Exception
        pass

    def train_step(self, *args):
        frames = [f.name for f in traceback.extract_stack() if "structattn_lite" in f.filename]
        raise Reached([*frames, "train_step"])

    monkeypatch.setenv("STRUCTATTN_RUNS", str(tmp_path))
    monkeypatch.setattr(StackedTrainer, "train_step", train_step)
    with pytest.raises(Reached) as reached:
        cli.main(["run", "grokking", "--profile", "smoke"])
    path = reached.value.args[0]
    assert path[0] == "main" and path[-3:] == ["fit", "_epoch", "train_step"]
    assert len(path) <= 12, " -> ".join(path)
