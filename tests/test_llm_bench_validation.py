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
        assert tok_m == pytest.approx(int(batch) * 2 * int(n) / lat_m, rel=1e-3)
        assert tok_s == pytest.approx(int(batch) * 2 * int(n) / lat_s, rel=1e-3)
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
