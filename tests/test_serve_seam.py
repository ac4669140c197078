"""Serving's one seam to the hardware (issue 27): no module of sim.apps.serve imports a kind's
folder (hw_models.gpu, .pim, .offload, .spatial); it reads the hardware through the mapper's API
(sim/apps/serve/stepcost.py). The import-linter `forbidden` contract in pyproject.toml says the
same for `lint-imports`; this checks it with grimp, imports inside functions included."""

import pytest

from hw_models.kinds import KINDS

SERVE = "sim.apps.serve"


def _kind_packages() -> set[str]:
    """The folders the registered kinds live in (cpu shares gpu's)."""
    return {e.module if isinstance(e.module, str) else e.module.__name__ for e in KINDS.values()}


def _kind_imports(graph, kinds: set[str]) -> list[str]:
    serve = [m for m in graph.modules if m == SERVE or m.startswith(SERVE + ".")]
    return sorted(f"{m} imports {d}" for m in serve for d in graph.find_modules_directly_imported_by(m)
                  if any(d == k or d.startswith(k + ".") for k in kinds))


def test_the_kinds_are_the_four_folders():
    # If a kind moves or a new one lands, the contract in pyproject.toml names it too.
    assert _kind_packages() >= {"hw_models.gpu", "hw_models.pim", "hw_models.offload", "hw_models.spatial"}


def test_serving_imports_no_hardware_kind():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("sim", "hw_models")
    found = _kind_imports(graph, _kind_packages())
    assert not found, "serving reaches into a hardware kind:\n" + "\n".join(found)


def test_the_check_sees_a_kind_import():
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph("sim", "hw_models")
    graph.add_import(importer=SERVE + ".placement", imported="hw_models.gpu.parallel")
    assert _kind_imports(graph, _kind_packages()) == [f"{SERVE}.placement imports hw_models.gpu.parallel"]
