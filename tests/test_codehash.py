"""Module digests: an edit to a module changes the digest of every CLI that imports it."""

import shutil

import pytest

from workflow_scripts import codehash


def test_import_closures_follow_the_package_imports():
    tables = codehash.import_closure("workflow_scripts.tables")
    assert "workflow_scripts.tasks" in tables and "workflow_scripts.common" in tables
    assert "workflow_scripts.train" not in tables
    train = codehash.import_closure("workflow_scripts.train")
    assert {"workflow_scripts.evaluate", "workflow_scripts.metrics", "workflow_scripts.features"} <= set(train)


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    dest = tmp_path / "workflow_scripts"
    shutil.copytree(codehash.PACKAGE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codehash, "PACKAGE_DIR", dest)
    codehash._imports.cache_clear()
    yield dest
    codehash._imports.cache_clear()


def test_digest_changes_exactly_for_dependents(package_copy):
    before = {m: codehash.module_digest(m) for m in ("tables", "train", "data", "evaluate")}
    with (package_copy / "metrics.py").open("a") as f:
        f.write("\n# an edit\n")
    codehash._imports.cache_clear()
    after = {m: codehash.module_digest(m) for m in before}
    assert after["train"] != before["train"] and after["evaluate"] != before["evaluate"]
    assert after["tables"] == before["tables"] and after["data"] == before["data"]


def test_unknown_module_is_an_error():
    with pytest.raises(ValueError, match="no module"):
        codehash.module_digest("nonexistent")


def test_relative_imports_inside_a_subpackage_resolve(package_copy):
    closure = codehash.import_closure("workflow_scripts.data")
    # data -> loaders (a package) -> its modules -> ..common / ..tasks two levels up
    assert {"workflow_scripts.loaders", "workflow_scripts.loaders.spans", "workflow_scripts.loaders.udpos",
            "workflow_scripts.loaders.source", "workflow_scripts.common", "workflow_scripts.tasks"} <= set(closure)
    before = {m: codehash.module_digest(m) for m in ("data", "train", "tables")}
    with (package_copy / "loaders" / "spans.py").open("a") as f:
        f.write("\n# an edit\n")
    codehash._imports.cache_clear()
    after = {m: codehash.module_digest(m) for m in before}
    assert after["data"] != before["data"] and after["tables"] == before["tables"]
