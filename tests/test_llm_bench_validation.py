"""scripts/llm_bench_validation.py: runs on the LLM-Inference-Bench rows (skipped without
../shared), writes its generated section into a markdown file (replacing, not appending,
on a rerun), and every error it reports is simulated / measured - 1 of the table's own columns."""

import importlib.util
import re

import pytest

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("llm_bench", ROOT / "scripts" / "llm_bench_validation.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

pytestmark = pytest.mark.skipif(not (bench.SHARED / "llm-inference-bench" / "All_results.csv").is_file(),
                                reason="shared/validation/llm-inference-bench not present")


def _pct(cell: str) -> float:
    return float(cell.rstrip("%")) / 100


def _rows(text: str) -> list[list[str]]:
    """Cells of the per-row table (the one with a `batch` column)."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| hw | engine | model |"))
    out = []
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        out.append([c.strip() for c in line.strip("|").split("|")])
    return out


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    path = tmp_path_factory.mktemp("doc") / "parallelism.md"
    path.write_text("# Many devices\n\nhand-written text\n")
    assert bench.main(["--rows", "4", "--doc", str(path)]) == 0
    assert bench.main(["--rows", "4", "--doc", str(path)]) == 0    # a rerun replaces the section
    return path.read_text()


def test_section_written_once_after_the_text(doc):
    assert doc.startswith("# Many devices\n\nhand-written text\n")
    assert doc.count(bench.BEGIN) == 1 and doc.count(bench.END) == 1
    rows = _rows(doc)
    assert len(rows) == 16                                           # 4 rows x (A100, H100) x (vLLM, TRT-LLM)
    assert {r[0] for r in rows} == {"A100-40GB", "H100"} and {r[1] for r in rows} == {"vLLM", "TensorRT-LLM"}


def test_errors_are_signed_ratios_of_the_columns(doc):
    signs = set()
    for hw, engine, model, tp, n, batch, lat_m, lat_s, lat_e, tok_m, tok_s, tok_e, kv, note in _rows(doc):
        assert int(tp) == 4 and not note
        lat_m, lat_s, tok_m, tok_s = map(float, (lat_m, lat_s, tok_m, tok_s))
        assert _pct(lat_e) == pytest.approx(lat_s / lat_m - 1, abs=1.5e-3)    # cells round to 0.1% and 1 ms
        # tok/s = batch x 2n / latency: its error is the inverse latency ratio (the tok/s cells round to 0.1,
        # too coarse at ~55 tok/s for 0.15%; the latency cells to 1 ms)
        assert _pct(tok_e) == pytest.approx(lat_m / lat_s - 1, abs=1.5e-3)
        # The bench's throughput: batch x (input + output) / latency, input = output = n.
        # (the tok/s cells round to 0.1 and the latency cells to 1 ms: half a unit of each, the latency's carried to
        # tok/s as tok/s x 0.5 ms / latency; at batch 1 and ~48 tok/s 0.1% alone was tighter than the cells'
        # rounding: 48.052 -> 48.1 against 48.048 from the rounded 5.328 s)
        for tok, lat in ((tok_m, lat_m), (tok_s, lat_s)):
            assert tok == pytest.approx(int(batch) * 2 * int(n) / lat, rel=1e-3, abs=0.05 + tok * 0.0005 / lat)
        signs.add(lat_e[0])
    assert signs == {"+", "-"}      # both signs occur, so a magnitude-only error would fail above


def test_summary_mape_from_the_rows(doc):
    rows, seen = _rows(doc), 0
    for line in doc.splitlines():
        m = re.match(r"\| (\S+) \| (\S+) \| (\d+) \| (\d+) \| ([\d.]+)% \| ([+-][\d.]+)% \|", line)
        if m:
            errs = [_pct(r[8]) for r in rows if r[0] == m[1] and r[1] == m[2] and not r[13]]
            assert len(errs) == int(m[3])
            assert float(m[5]) / 100 == pytest.approx(sum(map(abs, errs)) / len(errs), abs=1.5e-3)
            assert float(m[6]) / 100 == pytest.approx(sum(errs) / len(errs), abs=1.5e-3)
            seen += 1
    assert seen == 4     # one summary line per node and engine



def _busy_s(batch: int, blocks: int | None, n: int = 64) -> float:
    """Seconds the engine's iterations take (their durations summed) for an offline batch of `batch`
    requests of n + n tokens under TRT-LLM's scheduler, with a pool of `blocks` KV blocks (None: sized
    from memory). Busy time, not makespan: the run starts after the requests' front-end delay
    (engine_overheads), charged once since all arrive at t = 0."""
    from hw_models.machine import load_machine
    from sim.apps.serve.run import serve

    sched = dict(kind="trtllm", max_num_seqs=256, block_size=16, num_gpu_blocks_override=blocks)
    file, reqs = bench.offline_batch("llama2-7b", batch, n, sched, {"tp": 1}, "trtllm")
    res, _ = serve(file, load_machine("a6000"), requests=reqs)
    assert res.preemptions == 0                     # GUARANTEED_NO_EVICT: admission reserves each request's KV
    return float(res.iterations["duration_s"].sum())


@pytest.mark.parametrize("k", [2, 4])
def test_offline_batch_that_does_not_fit_runs_in_waves(k):
    """TRT-LLM admission (GUARANTEED_NO_EVICT) reserves each request's whole KV: input + output = 2 x 64
    tokens = 8 blocks of 16. A pool of 8k + 1 blocks (one is the pool's null block, kvpool.LruBlockPool)
    holds k requests, so 2k requests arriving at t = 0 run as two waves of k: the first k prefill together,
    decode 63 steps and finish in the same step (equal lengths); only then are the next k admitted, and
    they repeat the same steps at the same cost. So busy(2k, pool of k) = 2 x busy(k) (to the one step
    where the second wave is admitted, < 2%). With room for all 2k (pool sized from memory), one wave of
    2k: decode steps of a 7B model at batch <= 8 are weight-bound (13.5 GB of fp16 weights against a few
    MB of KV), so it takes well under 1.5 x."""
    one = _busy_s(k, None)
    assert _busy_s(2 * k, 8 * k + 1) == pytest.approx(2 * one, rel=0.02)
    assert _busy_s(2 * k, None) < 1.5 * one
    assert _busy_s(k, 8 * k + 1) == pytest.approx(one, rel=1e-9)   # k fit the small pool: one wave, as unlimited


def test_section_names_its_model_and_gives_both(tmp_path):
    """--both: the table's model is named, and the other model's summary and the common-row figures follow."""
    path = tmp_path / "p.md"
    path.write_text("# x\n")
    assert bench.main(["--rows", "1", "--both", "--doc", str(path)]) == 0
    text = path.read_text()
    assert "Table by serving replay" in text and "The other model, `sim run`" in text
    assert text.count("| hw | engine | rows simulated |") == 2 and "On the rows both simulate" in text
    assert bench.main(["--rows", "1", "--sim-run", "--doc", str(path)]) == 0
    assert "Table by `sim run`" in path.read_text() and "The other model" not in path.read_text()
