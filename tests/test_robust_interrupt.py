"""Issue 34, item 3: Ctrl-C anywhere (the imports, loading, the run, writing the outputs)
prints `interrupted` and exits 130, with no traceback, and leaves every output whole or
absent: never half of one, never a temporary file. SIGINT lands at random times across a
whole run, as the sweep resume test (tests/test_sweep.py) kills a sweep with SIGKILL."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from sim.apps.cli import main
from tests.conftest import ROOT, write_serving_file
from tests.test_sweep_serving import SERVE   # a tiny model: the run is mostly start-up
from tests.test_sweep import make_spec


def _interrupt(argv: list[str], delay_s: float) -> tuple[int, str]:
    """Run `sim argv`, send SIGINT after `delay_s` (unless it has finished); (exit status, stderr).
    A signal before the interpreter has installed its handler kills the process silently (status
    -SIGINT, which a shell reports as 130, like ours): counted as 130 here, with its empty stderr
    standing for the one line. Killed by SIGINT with the one line printed (Python re-raises an
    interrupt that ends the interpreter as the signal itself) counts as 130 the same way."""
    # The child gets the default SIGINT handler: a background job of a non-interactive shell ignores it.
    proc = subprocess.Popen([sys.executable, "-m", "sim.apps.cli", *argv], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + delay_s
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == -signal.SIGINT and err.decode().strip() in ("", "interrupted"):
        # killed by SIGINT after (or before) the one line: a shell reports this status as 130 too
        return 130, "interrupted"
    return proc.returncode, err.decode()


def _whole_or_absent(out, names) -> bool:
    """True when every output is there and complete, False when none is; anything else fails."""
    present = [(out / n).exists() for n in names]
    assert not any(p.name.startswith(".") for p in out.iterdir()), sorted(out.iterdir())   # no temporary files
    assert all(present) or not any(present), present    # all or none (one transaction)
    if all(present):
        json.loads((out / "o.json").read_text())
        json.loads((out / "t.json").read_text())
        assert (out / "r.csv").read_text().endswith("\n")
    return all(present)


def test_ctrl_c_at_random_times_during_sim_serve(tmp_path):
    f = write_serving_file(tmp_path, SERVE)
    out = tmp_path / "out"
    names = ("o.json", "r.csv", "t.json")
    argv = ["serve", str(f), "--hw", "a6000", "-q", "--json", str(out / "o.json"), "--requests", str(out / "r.csv"),
            "--chrome-trace", str(out / "t.json")]
    # A first whole run, in process (no second interpreter's imports to pay), fills the step-cost cache
    # (sim.apps.serve.tablecache, conftest's SIM_CACHE_DIR, which the processes below inherit) ...
    assert main(argv) == 0
    t0 = time.monotonic()
    rc, err = _interrupt(argv, 600)   # ... so this one times a run as the tries below make it: warm
    whole = time.monotonic() - t0
    assert rc == 0 and _whole_or_absent(out, names), err
    rng = random.Random(34)
    outcomes = []
    while len(outcomes) < 12 and outcomes.count(130) < 3:
        for n in names:
            (out / n).unlink(missing_ok=True)
        # Up to 3/4 of the timed run: on a shared, loaded machine one run can take 2x another, and signals
        # drawn up to the very end then land after it (outcome 0) more often than inside it.
        delay_s = rng.uniform(0.0, 0.75 * whole)
        rc, err = _interrupt(argv, delay_s)
        if rc == 130:
            assert err.strip() == "interrupted", err   # one line, no traceback
        else:
            assert rc == 0, err   # finished before the signal
            whole = min(whole, delay_s)   # a run took less than the timed one: draw the next signals earlier
        written = _whole_or_absent(out, names)
        assert written or rc == 130, (rc, written)   # interrupted after the outputs landed: whole
        outcomes.append(rc)
    assert outcomes.count(130) >= 3, outcomes   # enough tries land inside the run for the checks to mean something


def test_ctrl_c_at_random_times_during_a_sweep_keeps_the_store_whole(tmp_path):
    path = make_spec(tmp_path, {"workload.batch": [1, 2, 3, 4], "workload.gen_len": [4, 6, 8]})
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out), "--workers", "1", "-q", "--no-plots"]
    rng = random.Random(34)
    for _ in range(3):
        rc, err = _interrupt(argv, rng.uniform(0.5, 4.0))
        assert rc in (0, 130) and "Traceback" not in err, (rc, err)
        if rc == 130:   # "interrupted", with what the store holds when the points had started
            assert err.strip().splitlines()[-1].startswith("interrupted"), err
    rc, err = _interrupt(argv, 600)   # the rest, to the end
    assert rc == 0, err
    with sqlite3.connect(out / "results.sqlite") as c:
        keys = [k for (k,) in c.execute("SELECT key FROM points")]
    assert len(keys) == len(set(keys)) == 12
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_ctrl_c_to_a_sweep_s_process_group_stops_it_and_its_workers(tmp_path):
    """A terminal's Ctrl-C reaches the workers too. A worker interrupted inside the pool's queues could leave a
    lock held that the shutdown waited on forever (a trial froze 2 sweeps of ~35): workers ignore SIGINT and the
    command terminates them. The run ends at once, says how many points the store keeps (those it holds), and
    leaves no worker behind."""
    import os

    path = make_spec(tmp_path, {"workload.batch": list(range(1, 41)), "workload.gen_len": [4, 6, 8, 10]})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "sim.apps.cli", "sweep", str(path), "--out", str(out),
                             "--workers", "2", "-q", "--no-plots"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def stored() -> int:
        try:
            with sqlite3.connect(out / "results.sqlite") as c:
                return c.execute("SELECT COUNT(*) FROM points").fetchone()[0]
        except sqlite3.Error:
            return 0
    deadline = time.monotonic() + 120
    while stored() < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    line = err.decode().strip().splitlines()[-1]
    assert proc.returncode == 130 and line.startswith("interrupted: "), (proc.returncode, err)
    assert line.split(": ", 1)[1].startswith(f"{stored()} of 160 points are stored in ")
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes of the sweep's group left running: {left}"


@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8])
def test_ctrl_c_during_start_up(delay_s):
    # The imports of sim.apps.cli take a second or more; a KeyboardInterrupt traceback came from them.
    rc, err = _interrupt(["hw", "list"], delay_s)
    frames = [line for line in err.splitlines() if line.startswith('  File "')]
    if err.startswith("Fatal Python error: init_import_site") or frames and all('File "<frozen' in f for f in frames):
        # The interpreter's own start-up (its `site` module, runpy finding the `sim` package), before
        # the first line of sim runs: out of sim's reach. Any frame of sim's own would fail here.
        assert "/sim/" not in err and "/hw_models/" not in err, err
        return
    assert (rc, err.strip()) in ((130, "interrupted"), (0, "")), (rc, err)


def test_an_import_error_raised_by_ctrl_c_is_an_interrupt():
    # numpy re-raises a KeyboardInterrupt that lands in its C-extension import as an ImportError
    # (seen on a loaded machine at delay 0.2 s above): its context is the interrupt, so it is one.
    code = ("from sim.core import interrupt; interrupt.install()\n"
            "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    raise ImportError('numpy')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.strip()) == (130, "interrupted")
    plain = subprocess.run([sys.executable, "-c", code.replace("KeyboardInterrupt", "ValueError")], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 1 and "ImportError: numpy" in plain.stderr   # other errors keep their traceback


def test_any_error_after_ctrl_c_is_an_interrupt():
    # CPython's PyCapsule_Import (numpy importing datetime) swallows the KeyboardInterrupt and raises
    # a fresh ImportError with no context, as CI saw: the handler remembers the signal instead.
    code = ("from sim.core import interrupt; interrupt.install()\nimport os, signal, time\n"
            "try:\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(5)\nexcept KeyboardInterrupt:\n    pass\n"
            "raise ImportError('PyCapsule_Import could not import module datetime')\n")
    # The default SIGINT handler, as in _interrupt: under a background shell job the child inherits an
    # ignored SIGINT, the os.kill above does nothing and the test failed (pytest run with `cmd &`).
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (proc.returncode, proc.stderr.strip()) == (130, "interrupted")


def test_an_interrupt_python_cannot_propagate_still_ends_the_run():
    # SIGINT inside a weakref callback (the import system's module-lock cleanup, seen in CI at delay 0.1 s
    # above) was printed as "Exception ignored in ..." and the command went on to exit 0.
    code = ("from sim.core import interrupt; interrupt.install()\n"
            "import weakref\nclass A: pass\na = A()\n"
            "def cb(_): raise KeyboardInterrupt\n"
            "r = weakref.ref(a, cb)\ndel a\nprint('went on')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.strip(), proc.stdout) == (130, "interrupted", "")
    other = subprocess.run([sys.executable, "-c", code.replace("raise KeyboardInterrupt", "raise ValueError")],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert other.returncode == 0 and "Exception ignored" in other.stderr and other.stdout == "went on\n"


def test_ctrl_c_after_the_points_ran_says_what_the_store_holds(tmp_path, monkeypatch, capsys):
    """An architecture trial: a Ctrl-C that landed after the points (the workers' shutdown, the export) printed a
    bare `interrupted`, without the count or the resume hint. Wherever it lands once the store is open, the line
    counts the points the store holds."""
    import sim.apps.sweep.run as run

    path = make_spec(tmp_path, {"workload.batch": [1, 2]})
    out = tmp_path / "out"

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(run, "finish", ctrl_c)
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "-q", "--no-plots"]) == 130
    assert capsys.readouterr().err.strip() == (f"interrupted: 2 of 2 points are stored in {out / 'results.sqlite'}; "
                                               f"the same command resumes from them (`sim sweep export {out} --csv "
                                               "PATH` writes what they hold)")


def test_the_console_script_skips_interpreter_shutdown_after_an_interrupt(monkeypatch):
    """`sim`'s entry leaves with os._exit(130) after an interrupt: the interpreter's shutdown joins the process
    pool's manager thread, which an interrupt can leave waiting on a lock forever (a sweep trial: 1 of 2 Ctrl-Cs
    of a 90,000-point sweep printed "interrupted" and hung at 0% CPU). Any other code exits normally."""
    from sim.apps import cli
    exits = []
    monkeypatch.setattr(cli.os, "_exit", lambda code: exits.append(("_exit", code)))
    monkeypatch.setattr(cli, "main", lambda: 130)
    with pytest.raises(SystemExit):   # the patched _exit returns; the real one never does
        cli.entry()
    assert exits == [("_exit", 130)]
    monkeypatch.setattr(cli, "main", lambda: 2)
    with pytest.raises(SystemExit) as done:
        cli.entry()
    assert done.value.code == 2 and exits == [("_exit", 130)]
