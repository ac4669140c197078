"""The engine on its own: dependencies, contention, containers, determinism."""

import pytest

from sim.core.engine import Task, run


@pytest.mark.parametrize("in_order", [False, True])
def test_dependencies_and_contention(in_order):
    # a and b run in parallel on different resources; c waits for both on gpu.
    tl = run([Task("a", "gpu", 1.0), Task("b", "link", 2.0), Task("c", "gpu", 1.0, deps=("a", "b"))],
             in_order=in_order)
    by = tl.by_task()
    assert (by["c"].start_s, by["c"].end_s) == (2.0, 3.0)
    assert tl.makespan_s == 3.0
    assert tl.utilization() == {"gpu": pytest.approx(2 / 3), "link": pytest.approx(2 / 3)}


def test_in_order_streams_block_behind_an_unready_head():
    # On an in-order stream, x waits for its dependency and y (ready at 0) waits behind x.
    tasks = [Task("slow", "dma", 5.0), Task("x", "gpu", 1.0, deps=("slow",)), Task("y", "gpu", 1.0)]
    assert run(tasks, in_order=True).by_task()["y"].start_s == 6.0
    # With a shared resource, a ready task goes first.
    assert run(tasks).by_task()["y"].start_s == 0.0


@pytest.mark.parametrize("in_order", [False, True])
def test_capacity_container_limits_prefetch(in_order):
    # A 10-byte buffer: each load takes 6 bytes, freed when its compute ends, so
    # the second load cannot start until the first compute has released its bytes.
    tasks = [
        Task("load0", "link", 1.0, acquire=(("buf", 6),)),
        Task("comp0", "gpu", 3.0, deps=("load0",), release=(("buf", 6),)),
        Task("load1", "link", 1.0, acquire=(("buf", 6),)),
        Task("comp1", "gpu", 3.0, deps=("load1",), release=(("buf", 6),)),
    ]
    tl = run(tasks, containers={"buf": 10}, in_order=in_order)
    by = tl.by_task()
    assert by["load1"].start_s == 4.0      # waits for comp0 to free its 6 bytes at t=4
    assert tl.makespan_s == 8.0
    assert tl.peak_used["buf"] == 6


def test_errors():
    with pytest.raises(KeyError, match="unknown dependencies"):
        run([Task("a", "gpu", 1.0, deps=("nope",))])
    with pytest.raises(Exception, match="holds only"):
        run([Task("a", "gpu", 1.0, acquire=(("buf", 20),))], containers={"buf": 10})
    with pytest.raises(RuntimeError, match="deadlock"):
        run([Task("a", "gpu", 1.0, acquire=(("buf", 6),)), Task("b", "gpu", 1.0, acquire=(("buf", 6),))],
            containers={"buf": 10})


def test_one_plain_stream_is_the_event_loops_timeline_to_the_bit(monkeypatch):
    """An in-order stream with no container traffic runs without simpy (engine._run_one_stream): every interval,
    its start, end, tag and group, equals the event loop's exactly, over random durations (zeros among them) and
    dependencies on earlier tasks; a dependency on a later task, two resources or a container still take the
    event loop (and its errors)."""
    import random

    from sim.core import engine

    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 40)
        tasks = [Task(f"t{i}", "gpu", rng.choice([0.0, rng.random() * 1e-3, rng.random()]),
                      tuple(f"t{j}" for j in rng.sample(range(i), min(i, rng.randint(0, 3)))), tag=i)
                 for i in range(n)]
        assert engine._one_plain_stream(tasks)
        fast = run(tasks, containers={"hbm": 1e9}, in_order=True)
        monkeypatch.setattr(engine, "_one_plain_stream", lambda ts: False)
        slow = run(tasks, containers={"hbm": 1e9}, in_order=True)
        monkeypatch.undo()
        assert fast.intervals == slow.intervals and fast.peak_used == slow.peak_used and fast.levels == slow.levels
        # to the type: simpy's clock starts at the int 0 (a review: `0.0` had changed --json's first start)
        assert [(type(i.start_s), type(i.end_s)) for i in fast.intervals] == \
            [(type(i.start_s), type(i.end_s)) for i in slow.intervals]
    later = [Task("a", "gpu", 1.0, ("b",)), Task("b", "gpu", 1.0)]
    two = [Task("a", "gpu", 1.0), Task("b", "link", 1.0, ("a",))]
    held = [Task("a", "gpu", 1.0, acquire=(("hbm", 1.0),), release=(("hbm", 1.0),))]
    assert not any(engine._one_plain_stream(ts) for ts in (later, two, held))
    with pytest.raises(RuntimeError, match="deadlock"):
        run(later, in_order=True)
