"""The package's shape: declared layers that every import points down, no import circle,
at most eight layers, no study importing another, and every notebook importing only its
own study."""

import ast
import json
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "structattn_lite"
LAYERS = ("theory", "models", "data", "training")
# The package's layers, bottom first: a module may import its own layer and those below,
# never one above. Each names module prefixes ("structattn_lite." left off; "" is the
# package's own __init__); a module belongs to the layer of its longest matching prefix.
PACKAGE_LAYERS = (
    (
        "foundation",
        ("", "config", "names", "stats", "records", "locking", "report", "files", "schemas"),
    ),
    ("blocks", ("theory", "models", "data", "attention", "tasks")),
    ("training", ("training",)),
    ("studies", ("studies",)),
    ("driver", ("runs",)),
    ("outputs", ("claims", "findings", "committed_figures", "notebook_runner", "dashboard")),
    ("entry", ("cli", "__main__")),
)
MAX_CHAIN = 10  # modules on the longest chain of imports
MAX_LAYERS = 8
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


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def import_edges(name: str, path: Path, known) -> set[str]:
    """The package modules ``name`` imports, at any depth (lazy imports count): ``from a
    import b`` is module ``a.b`` when that is a module, else ``a`` itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {m for m in out if m in known and m != name}


def import_graph() -> nx.DiGraph:
    known = modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for name, path in known.items():
        graph.add_edges_from((name, target) for target in import_edges(name, path, known))
    return graph


def layer_of(module: str) -> int:
    """The index in PACKAGE_LAYERS of the layer ``module`` belongs to."""
    rel = module.removeprefix("structattn_lite").removeprefix(".")
    best = None
    for i, (_, prefixes) in enumerate(PACKAGE_LAYERS):
        for prefix in prefixes:
            if rel == prefix or (prefix and rel.startswith(prefix + ".")):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"{module} is in no layer of PACKAGE_LAYERS: declare it"
    return best[0]


def upward_imports(graph: nx.DiGraph) -> list[str]:
    return [f"{a} -> {b}" for a, b in graph.edges if layer_of(b) > layer_of(a)]


def layer_count(graph: nx.DiGraph) -> int:
    """How tall the package stands: the most layers one chain of imports passes through
    (the longest path, counted in nodes, of the condensation of the layer graph)."""
    layers = nx.DiGraph()
    layers.add_nodes_from(layer_of(m) for m in graph)
    layers.add_edges_from((layer_of(a), layer_of(b)) for a, b in graph.edges
                          if layer_of(a) != layer_of(b))  # fmt: skip
    return nx.dag_longest_path_length(nx.condensation(layers)) + 1


def study_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "studies" else None


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert graph.number_of_edges() > 100  # the parser sees the package's imports
    cycles = sorted(nx.simple_cycles(graph), key=len)
    assert not cycles, f"import circles: {cycles[:3]}"


def test_every_import_points_down_the_declared_layers():
    assert not (up := upward_imports(import_graph())), f"imports up a layer: {up}"


def test_the_package_stands_at_most_eight_layers_tall():
    assert len(PACKAGE_LAYERS) <= MAX_LAYERS
    assert layer_count(import_graph()) <= MAX_LAYERS


def test_no_chain_of_imports_passes_through_more_than_ten_modules():
    """Every import counts, a function's too: a module that imports another only where it
    is used still needs it. The longest chain is what a reader follows to the bottom."""
    chain = nx.dag_longest_path(import_graph())
    assert len(chain) <= MAX_CHAIN, f"{len(chain)} modules: " + " -> ".join(chain)


def test_the_layout_checks_see_a_circle_an_upward_import_and_too_many_layers(tmp_path):
    """The checks above on a package made up for them."""
    root = tmp_path / "structattn_lite"
    (root / "claims").mkdir(parents=True)
    files = {"__init__.py": "", "config.py": "import structattn_lite.report\n",
             "report.py": "def f():\n    from structattn_lite import config\n",
             "claims/__init__.py": "from . import csp\n",
             "claims/csp.py": "from ..runs import sweep\nfrom structattn_lite.claims import x\n",
             "runs.py": "sweep = 1\n"}  # fmt: skip
    for name, text in files.items():
        (root / name).write_text(text)
    known = {".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}  # fmt: skip
    graph = nx.DiGraph()
    for name, path in known.items():
        graph.add_edges_from((name, t) for t in import_edges(name, path, known))
    cycles = {frozenset(c) for c in nx.simple_cycles(graph)}
    assert cycles == {frozenset({"structattn_lite.config", "structattn_lite.report"}),
                      frozenset({"structattn_lite.claims", "structattn_lite.claims.csp"})}  # fmt: skip
    graph.remove_edge("structattn_lite.claims.csp", "structattn_lite.claims")
    graph.add_edge("structattn_lite.runs", "structattn_lite.claims")  # driver -> outputs: fine
    graph.add_edge("structattn_lite.config", "structattn_lite.runs")  # foundation -> driver: up
    assert "structattn_lite.config -> structattn_lite.runs" in upward_imports(graph)
    names = ["cli", "claims", "runs", "studies", "training", "theory", "config"]  # a layer each
    chain = nx.path_graph([f"structattn_lite.{n}" for n in names], create_using=nx.DiGraph)
    assert layer_count(chain) == len(PACKAGE_LAYERS)


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
    from structattn_lite.training.trainer import Trainer

    class Reached(BaseException):  # past the sweep's guard, which records an Exception
        pass

    def train_step(self, *args):
        frames = [f.name for f in traceback.extract_stack() if "structattn_lite" in f.filename]
        raise Reached([*frames, "train_step"])

    monkeypatch.setenv("STRUCTATTN_RUNS", str(tmp_path))
    monkeypatch.setattr(Trainer, "train_step", train_step)
    with pytest.raises(Reached) as reached:
        cli.main(["run", "grokking", "--profile", "smoke"])
    path = reached.value.args[0]
    assert path[0] == "main" and path[-3:] == ["fit", "_epoch", "train_step"]
    assert len(path) <= 12, " -> ".join(path)
