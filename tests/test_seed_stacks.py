"""A seed's float32 numbers depend on the stack it trains in (its size and the seed's place
in it), so a stack is part of a grid's protocol: a grid names its stacks (``stack``), the
grid's runs train in them, ``structattn run --seed k`` trains k's whole stack, and a record
trained in another stack is not taken for the grid's. This is what makes a committed
stacked seed repeat on its own."""

import pytest
import torch

from structattn_lite import cli, config
from structattn_lite.records import RunStore
from structattn_lite.runs import run_grid, sweep
from structattn_lite.studies.grokking import grids
from structattn_lite.studies.grokking.experiment import grid

TOY = {"tasks": ("parity",), "seeds": (0, 1, 2, 3), "epochs": 3, "n": 160, "presets": ("paper",),
       "stack": 2}  # fmt: skip


@pytest.fixture
def toy_grid(monkeypatch):
    monkeypatch.setitem(grids.GRIDS, "toy_stacks", TOY)
    return "toy_stacks"


def by_seed(records):
    return {r.config["seed"]: r for r in records}


def assert_bitwise(a, b):
    assert a.key == b.key
    assert a.extra["step_grad_norms"] == b.extra["step_grad_norms"]  # float32, not close: equal
    assert a.history.equals(b.history)


def test_a_grid_names_its_stacks_as_consecutive_blocks_of_its_seeds():
    from types import SimpleNamespace as cfg

    stacks = config.seed_stacks(TOY)
    assert [stacks.of(cfg(task="parity", seed=s)) for s in (0, 1, 2, 3, 4)] == [
        (0, 1), (0, 1), (2, 3), (2, 3), None
    ]  # fmt: skip
    assert config.seed_stacks({**TOY, "stack": 3}).of(cfg(task="parity", seed=3)) == (3,)
    assert (
        config.seed_stacks({**TOY, "stack": 3}).of(cfg(task="mod3", seed=3)) is None
    )  # no such task
    # one size per task: a task it leaves out names no stack (gap_seeds: parity's 15 seeds)
    gap_seeds = config.seed_stacks(grids.GRIDS["gap_seeds"])
    assert gap_seeds.of(cfg(task="parity", seed=12)) == tuple(range(10, 25))
    assert gap_seeds.of(cfg(task="mod3", seed=12)) is None
    assert config.seed_stacks({k: v for k, v in TOY.items() if k != "stack"}) is None
    fresh_gap = config.seed_stacks(grids.GRIDS["fresh_gap"])
    assert fresh_gap.of(cfg(task="mod3", seed=17)) == tuple(range(15, 20))
    # "all": each task's seeds as one stack (the length study's authors_fresh grid)
    from structattn_lite.studies.length.grids import GRIDS as LENGTH

    fresh = config.seed_stacks(LENGTH["authors_fresh"])
    assert fresh.of(cfg(task="parity", seed=12)) == tuple(range(10, 22))
    assert fresh.of(cfg(task="mod3_authors", seed=12)) == tuple(range(10, 20))
    with pytest.raises(ValueError, match="stack"):
        config.seed_stacks({**TOY, "stack": 0})


def test_a_seed_repeats_when_its_stack_is_rebuilt_and_a_record_of_another_stack_is_not_taken(
    toy_grid, tmp_path, capsys
):
    torch.set_num_threads(1)
    configs = {c.seed: c for c in grid(toy_grid)}
    # the whole grid, in its stacks: seed 3 trains beside seed 2
    whole = by_seed(run_grid("grokking", toy_grid, progress=False, store=RunStore(tmp_path / "a")))
    assert [whole[s].extra["stack"] for s in (0, 1, 2, 3)] == [[0, 1], [0, 1], [2, 3], [2, 3]]

    # `structattn run --seed 3` trains seed 3's whole stack, and says why
    argv = ["run", "grokking", "--grid", toy_grid, "--seed", "3", "--threads", "1"]
    assert cli.main([*argv, "--runs-dir", str(tmp_path / "b")]) == 0
    assert "depend on its stack: --seed means its whole stack" in capsys.readouterr().err
    alone = by_seed(sweep("grokking", [configs[3]], store=RunStore(tmp_path / "b"),
                          only_cached=True, progress=False))  # fmt: skip
    assert alone[3].extra["stack"] == [2, 3]
    assert_bitwise(alone[3], whole[3])  # the committed seed repeats on its own

    # seed 3 trained by itself is a different run of the same config: the grid's protocol
    # does not take it, and trains it again in its stack
    store = RunStore(tmp_path / "c")
    lone = sweep("grokking", [configs[3]], store=store, progress=False)[0]
    assert lone.extra["stack"] == [3] and lone.extra["seed_batched"] == 1  # a stack of one
    stacks = config.seed_stacks(TOY)
    with pytest.warns(UserWarning, match=r"trains it in the stack \[2, 3\], so it trains again"):
        again = by_seed(sweep("grokking", [configs[2], configs[3]],
                              store=store, progress=False, stacks=stacks))  # fmt: skip
    assert_bitwise(again[3], whole[3])

    # part of a stack, asked for through the library, trains but says what it changes
    with pytest.warns(UserWarning, match=r"seeds \[1\] of the stack \[0, 1\] train without"):
        sweep("grokking", [configs[1]], store=RunStore(tmp_path / "d"), progress=False,
              stacks=stacks)  # fmt: skip
