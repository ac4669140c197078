"""The local Dask cluster a sweep starts (--executor dask-local) runs with its housekeeping slowed
(sim.apps.sweep.run.LOCAL_DASK_CONFIG, issue 30): the settings must reach the worker processes, which
the nannies start with the configuration they were created under, and be undone when the cluster closes."""

from __future__ import annotations

import pytest

from sim.apps.sweep.run import LOCAL_DASK_CONFIG, make_executor


def _settings() -> list:
    import dask
    return [dask.config.get(k) for k in LOCAL_DASK_CONFIG]


@pytest.mark.slow
def test_dask_local_workers_run_with_the_slowed_housekeeping():
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    before = [dask.config.get(k) for k in LOCAL_DASK_CONFIG]
    assert before != list(LOCAL_DASK_CONFIG.values())   # Dask's defaults differ, or the test could not fail
    with make_executor("dask-local", 1) as ex:
        on_workers = ex._client.run(_settings)
    assert list(on_workers.values()) == [list(LOCAL_DASK_CONFIG.values())]
    assert [dask.config.get(k) for k in LOCAL_DASK_CONFIG] == before   # the sweep's process is left as it was
