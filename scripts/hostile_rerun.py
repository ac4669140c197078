"""Re-run hostile inputs against `sim serve`, `sim sweep` and the trace commands (issue 34's
closing check) and count what a hostile user would see: tracebacks (anything but exit 0, 2 or
130, or a traceback on stderr), hangs (over --timeout s), wrong results (exit 0 with a summary
that breaks an invariant, or a requested output missing) and data-loss paths (a file the
command did not name as an output changed or vanished).

    python scripts/hostile_rerun.py [--timeout 60] [--out /tmp/hostile]

Runs in-process (sim.apps.cli.main), each command in a fresh copy of a small folder of inputs:
a serving file, a request trace, a length histogram, a model config.json, a hardware YAML, a
Chrome trace with its .meta.json and a sweep spec.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.apps.cli import main  # noqa: E402

TINY = dict(name="tiny", hidden_size=64, intermediate_size=172, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=4096)
SERVE = dict(name="s", model="config.json", flash_attention=True, serving=dict(
    arrivals=dict(process="poisson", rate=50, num_requests=20, seed=0),
    lengths=dict(prompt=dict(dist="histogram", path="hist.csv"), output=dict(dist="fixed", value=8)),
    scheduler=dict(kind="vllm", max_num_batched_tokens=512)))
INPUTS = ("serve.yaml", "trace.csv", "hist.csv", "config.json", "hw.yaml", "t.trace.json", "t.meta.json",
          "sweep.yaml", "out/results.sqlite")


class Hang(Exception):
    pass


def _folder(tmp: Path) -> Path:
    d = Path(tempfile.mkdtemp(dir=tmp))
    (d / "config.json").write_text(json.dumps(TINY))
    (d / "hist.csv").write_text("length,count\n16,3\n64,1\n")
    (d / "trace.csv").write_text("arrival_s,prompt_len,output_len\n" + "".join(f"{i * 0.01},{32 + i},{4}\n"
                                                                             for i in range(20)))
    (d / "serve.yaml").write_text(yaml.safe_dump(SERVE))
    shutil.copy(ROOT / "hw_models" / "presets" / "a6000.yaml", d / "hw.yaml")
    for suffix in (".trace.json", ".meta.json"):
        shutil.copy(ROOT / "tests" / "data" / f"synthetic_cuda_L1{suffix}", d / f"t{suffix}")
    (d / "sweep.yaml").write_text(yaml.safe_dump(dict(name="w", workload="serve.yaml", hw="a6000", metrics=["ttft_p90_s"],
                                                      axes={"workload.serving.arrivals.rate": [10, 100]})))
    return d


def _digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() and not p.is_symlink()}


def _serve_edits() -> dict[str, dict]:
    """Serving files a hostile user writes: each edit of the serving section (None: the file as is)."""
    trace = dict(arrivals=dict(process="trace"), trace=dict(path="trace.csv", format="plain"), lengths=None)
    return {
        "as is": {}, "negative seed": dict(arrivals=dict(SERVE["serving"]["arrivals"], seed=-1)),
        "swap without host": dict(scheduler=dict(kind="vllm-v0", preemption="swap")),
        "orca small budget": dict(scheduler=dict(kind="orca", max_num_batched_tokens=20)),
        "budget 1 sarathi": dict(scheduler=dict(kind="sarathi", max_num_batched_tokens=1, max_num_seqs=4)),
        "budget 1 vllm": dict(scheduler=dict(kind="vllm", max_num_batched_tokens=1)),
        "replayed trace": trace,
        "replicas": dict(router=dict(replicas=3), arrivals=dict(SERVE["serving"]["arrivals"], rate=2000)),
        "disaggregated": dict(disaggregated=dict(prefill=dict(hw="h100_sxm", replicas=2), decode=dict(hw="a6000", replicas=2),
                                                 transfer=dict(bandwidth_bytes_per_s=1e10))),
        "prefix caching": dict(prefix_caching=dict(enabled=True), scheduler=dict(kind="vllm-v0")),
        "speculative": dict(speculative=dict(draft=TINY, k=3)),
        "static": dict(scheduler=dict(kind="static", batch_size=4)),
    }


TRACES = {   # trace.csv contents a hostile user replays
    "1e17 s": "arrival_s,prompt_len,output_len\n100000000000000000,32,4\n100000000000000000.5,32,4\n",
    "epoch ns jsonl": None,
    "nan time": "arrival_s,prompt_len,output_len\nnan,32,4\n",
    "unsorted": "arrival_s,prompt_len,output_len\n1,32,4\n0,32,4\n",
    "words": "arrival_s,prompt_len,output_len\nabc,x,y\n",
    "empty": "arrival_s,prompt_len,output_len\n",
    "azure mixed offsets": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5+00:00,32,4\n"
                           "2023-11-16 19:15:47+01:00,32,4\n",
}


# The folder's files each command reads: an output over one of these must be refused. An output
# over a file the command does not read is the user's explicit choice, not data loss.
READS = {"serve": {"serve.yaml", "hist.csv", "config.json", "hw.yaml", "link-to-serve"},
         "trace": {"t.trace.json", "t.meta.json"}, "sweep": {"out/results.sqlite"}}


def _commands(d: Path) -> list[tuple[str, list[str], set[str]]]:
    """(label, argv, the outputs it names) for every hostile command of one folder."""
    out: list[tuple[str, list[str], set[str]]] = []
    s = str(d / "serve.yaml")
    hw = str(d / "hw.yaml")
    flags = ("--json", "--requests", "--chrome-trace")
    targets = [*INPUTS, "link-to-serve", "hard-to-trace", "o.json", "o.csv", "o.parquet", "o.txt"]
    for flag, target in itertools.product(flags, targets):
        for capacity in ((), ("--find-capacity", "--slo", "ttft_p90=0.001")):
            out.append((f"serve {flag} {target} {' '.join(capacity)}",
                        ["serve", s, "--hw", hw, "-q", flag, str(d / target), *capacity], {target}))
    for target in [*INPUTS, "o.json"]:
        out.append((f"replay --json {target}", ["replay", str(d / "t.trace.json"), "--hw", "a6000", "--json",
                                                str(d / target)], {target}))
        out.append((f"validate --json {target}", ["validate", str(d / "t.trace.json"), "--hw", "a6000", "--json",
                                                  str(d / target)], {target}))
        out.append((f"calibrate -o {target}", ["calibrate", str(d / "t.trace.json"), "--hw", "a6000", "-o",
                                               str(d / target)], {target}))
        out.append((f"sweep export --csv {target}", ["sweep", "export", str(d / "out"), "--csv", str(d / target)],
                    {target}))
    return out


def _prepare(d: Path, label: str) -> None:
    """Links and a sweep store some commands point at."""
    (d / "link-to-serve").symlink_to(d / "serve.yaml")
    os.link(d / "trace.csv", d / "hard-to-trace")
    if "export" in label or "results.sqlite" in label:
        with contextlib.redirect_stderr(io.StringIO()):
            main(["sweep", str(d / "sweep.yaml"), "--out", str(d / "out"), "-q", "--no-plots", "--workers", "1"])


def run_one(argv: list[str], timeout: int) -> tuple[int | None, str]:
    err = io.StringIO()

    def alarm(*_):
        raise Hang()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    except Hang:
        rc = None
    except BaseException as exc:   # a traceback: anything main() lets out
        return -1, f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, err.getvalue()


def _wrong(d: Path, argv: list[str], named: set[str]) -> str | None:
    """A reason the exit-0 run's outputs are wrong, or None."""
    for target in named:
        if not (d / target).exists():
            return f"{target}: not written"
    if "--json" in argv and argv[0] == "serve" and "--find-capacity" not in argv:
        s = json.loads((d / argv[argv.index("--json") + 1]).read_text())
        if s["completed"] + s["rejected"] != s["requests"]:
            return "completed + rejected != requests"
        if s["engine_busy"] > 1 + 1e-9 or any(v > 1 + 1e-9 for v in s["utilization"].values()):
            return f"busy share above 1: {s['engine_busy']}"
        if s["completed"] and not s["throughput_tok_s"] > 0:
            return "throughput 0 with completed requests"
    return None


def main_(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    tmp = Path(a.out or tempfile.mkdtemp(prefix="hostile"))
    tmp.mkdir(parents=True, exist_ok=True)
    counts = dict(commands=0, exit0=0, exit2=0, tracebacks=0, hangs=0, wrong=0, data_loss=0)
    findings: list[str] = []

    def record(label: str, d: Path, argv: list[str], named: set[str]) -> None:
        before = _digest(d)
        rc, err = run_one(argv, a.timeout)
        after = _digest(d)
        counts["commands"] += 1
        reads = READS["serve" if argv[0] == "serve" else "sweep" if argv[0] == "sweep" else "trace"]
        reads = reads | ({"trace.csv", "hard-to-trace"} if "trace:" in label or "replayed" in label else set())
        lost = [k for k, v in before.items() if after.get(k) != v and (k not in named or k in reads)
                and not (k.startswith("out/") and argv[0] == "sweep" and "export" not in argv)]
        if lost:
            counts["data_loss"] += 1
            findings.append(f"DATA LOSS {label}: {lost}")
        if rc is None:
            counts["hangs"] += 1
            findings.append(f"HANG {label}")
        elif rc == -1 or rc not in (0, 2, 130) or "Traceback" in err:
            counts["tracebacks"] += 1
            findings.append(f"TRACEBACK {label}: {err.strip().splitlines()[-1] if err.strip() else rc}")
        elif rc == 2:
            counts["exit2"] += 1
            lines = [x for x in err.splitlines() if x.startswith("error: ")]
            if len(lines) != 1:
                counts["tracebacks"] += 1
                findings.append(f"NOT ONE LINE {label}: {err!r}")
        else:
            counts["exit0"] += 1
            why = _wrong(d, argv, named)
            if why:
                counts["wrong"] += 1
                findings.append(f"WRONG {label}: {why}")

    for i in range(len(_commands(tmp))):
        d = _folder(tmp)
        label, argv, named = _commands(d)[i]
        _prepare(d, label)
        record(label, d, argv, named)
        shutil.rmtree(d)
    for (name, edit), (tname, trace) in itertools.product(_serve_edits().items(), [(None, None), *TRACES.items()]):
        if tname is not None and name != "replayed trace":
            continue
        d = _folder(tmp)
        raw = json.loads(json.dumps(SERVE))
        for k, v in edit.items():
            if v is None:
                raw["serving"].pop(k, None)
            else:
                raw["serving"][k] = v
        if tname == "epoch ns jsonl":
            (d / "trace.jsonl").write_text('{"arrival_time_ns": 1700000000000000001, "input_toks": 30, "output_toks": 4}\n'
                                           '{"arrival_time_ns": 1700000000001000001, "input_toks": 30, "output_toks": 4}\n')
            raw["serving"]["trace"] = dict(path="trace.jsonl", format="llmservingsim")
        elif trace is not None:
            (d / "trace.csv").write_text(trace)
            if "azure" in tname:
                raw["serving"]["trace"]["format"] = "azure"
        (d / "serve.yaml").write_text(yaml.safe_dump(raw))
        label = f"serve file: {name}" + (f" / trace {tname}" if tname else "")
        record(label, d, ["serve", str(d / "serve.yaml"), "--hw", "a6000", "-q", "--json", str(d / "o.json")], {"o.json"})
        shutil.rmtree(d)
    print(json.dumps(counts))
    for f in findings:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main_())
