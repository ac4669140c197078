"""`sim validate-serving --workers N`: the runs simulated in worker processes, whole groups of runs that share
step costs each, give the same results in the same order as one process (sim.apps.serve.validate.simulate)."""

from __future__ import annotations

import pickle

import pytest

from sim.apps.cli import main
from sim.apps.serve.validate import Run, machine_loader, simulate

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _runs() -> list[Run]:
    """Five small closed-loop runs over two step-cost groups (vLLM and SGLang), one that cannot be built
    (tensor parallelism 3 does not divide 32 heads), interleaved so that order matters."""
    def run(name, engine, clients, tp=1):
        return Run(name, "h100_sxm", engine, MODEL, isl=128, osl=8, concurrency=clients, tp=tp,
                   measured={"ttft_s": 0.05, "tpot_s": 0.01})
    return [run("a", "vllm", 1), run("b", "sglang", 2), run("bad", "vllm", 1, tp=3),
            run("c", "vllm", 2), run("d", "sglang", 1)]


def test_workers_give_the_results_of_one_process_in_order():
    loader = machine_loader()
    pickle.dumps(loader)   # what a worker process receives
    one, failed_one = simulate(_runs(), loader, requests_per_client=2)
    two, failed_two = simulate(_runs(), machine_loader(), requests_per_client=2, jobs=2)
    assert [r.run.name for r in one] == [r.run.name for r in two] == ["a", "b", "c", "d"]
    assert failed_one == failed_two and [name for name, _ in failed_two] == ["bad"]
    for x, y in zip(one, two):
        assert x.sim == y.sim and x.error == y.error and x.features == y.features


def test_workers_below_one_is_one_line(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    path.write_text("x\n1\n")
    assert main(["validate-serving", str(path), "--hw", "h100_sxm", "--workers", "0"]) == 2
    assert "--workers 0: must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("jobs", [1, 2])
def test_progress_counts_every_run(jobs):
    seen: list[tuple[int, int]] = []
    simulate(_runs()[:2], machine_loader(), requests_per_client=1, progress=lambda d, n: seen.append((d, n)), jobs=jobs)
    assert seen[-1] == (2, 2)
