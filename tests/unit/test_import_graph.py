"""The import graph beyond the layers `.importlinter` checks: the pure KubeVirt vocabulary
(`ch_launcher.kubevirt`) imports in one direction only, so any of its modules can be imported
first and none is half-initialised when another reads it."""

from __future__ import annotations

import grimp
import pytest

GRAPH = grimp.build_graph("ch_launcher")
VOCABULARY = sorted(m for m in GRAPH.modules if m.startswith("ch_launcher.kubevirt."))


@pytest.mark.parametrize("module", VOCABULARY)
def test_no_module_of_the_kubevirt_vocabulary_is_imported_by_what_it_imports(module):
    cycles = [chain for imported in sorted(GRAPH.find_modules_directly_imported_by(module)) if imported in VOCABULARY
              and (chain := GRAPH.find_shortest_chain(importer=imported, imported=module)) is not None]
    assert cycles == [], f"{module} is imported back by {cycles}"
