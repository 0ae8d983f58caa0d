"""Module digests: an edit to a module changes the digest of every CLI that imports it."""

import shutil

import pytest

from workflow_scripts.spec import codehash

pytestmark = pytest.mark.unit


def test_import_closures_follow_the_package_imports():
    tables = codehash.import_closure("workflow_scripts.reporting.tables")
    assert "workflow_scripts.spec.tasks" in tables and "workflow_scripts.common" in tables
    assert "workflow_scripts.training.train" not in tables
    train = codehash.import_closure("workflow_scripts.training.train")
    assert {
        "workflow_scripts.evaluation.evaluate",
        "workflow_scripts.evaluation.metrics",
        "workflow_scripts.data.features",
    } <= set(train)
    # evaluate.py selects training's models; what only the metric file records (its CLI,
    # metric_file.py) is not imported by training, so a field added there reruns no training
    assert "workflow_scripts.evaluation.metric_file" not in train


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    dest = tmp_path / "workflow_scripts"
    shutil.copytree(codehash.PACKAGE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(codehash, "PACKAGE_DIR", dest)
    codehash._imports.cache_clear()
    yield dest
    codehash._imports.cache_clear()


def test_digest_changes_exactly_for_dependents(package_copy):
    names = ("reporting.tables", "training.train", "data.prepare", "evaluation.evaluate")
    before = {m: codehash.module_digest(m) for m in names}
    with (package_copy / "evaluation" / "metrics.py").open("a") as f:
        f.write("\nAN_EDIT = 1\n")
    codehash._imports.cache_clear()
    after = {m: codehash.module_digest(m) for m in before}
    assert after["training.train"] != before["training.train"]
    assert after["evaluation.evaluate"] != before["evaluation.evaluate"]
    assert after["reporting.tables"] == before["reporting.tables"]
    assert after["data.prepare"] == before["data.prepare"]


def test_unknown_module_is_an_error():
    with pytest.raises(ValueError, match="no module"):
        codehash.module_digest("nonexistent")


def test_a_subpackage_edit_reaches_its_importers_through_the_package_init(package_copy):
    closure = codehash.import_closure("workflow_scripts.data.prepare")
    # prepare -> loaders (a package whose __init__ imports the registry and the source) -> common, tasks
    assert {
        "workflow_scripts.data.loaders",
        "workflow_scripts.data.loaders.registry",
        "workflow_scripts.data.loaders.source",
        "workflow_scripts.common",
        "workflow_scripts.spec.tasks",
    } <= set(closure)
    before = {m: codehash.module_digest(m) for m in ("data.prepare", "training.train", "reporting.tables")}
    with (package_copy / "data" / "loaders" / "registry.py").open("a") as f:
        f.write("\nAN_EDIT = 1\n")
    codehash._imports.cache_clear()
    after = {m: codehash.module_digest(m) for m in before}
    assert after["data.prepare"] != before["data.prepare"]
    assert after["reporting.tables"] == before["reporting.tables"]


def test_a_converter_edit_reaches_only_the_tasks_it_converts(package_copy):
    """Converters are imported on demand by their task's entry: no job's module closure holds
    them; a task's fingerprint holds its own converter's hash."""
    assert not any(".loaders.spans" in m for m in codehash.import_closure("workflow_scripts.data.prepare"))
    before = codehash.task_fingerprint(["squad", "xquad", "xnli"])
    prepare = codehash.module_digest("data.prepare")
    with (package_copy / "data" / "loaders" / "spans.py").open("a") as f:
        f.write("\nAN_EDIT = 1\n")
    codehash._imports.cache_clear()
    after = codehash.task_fingerprint(["squad", "xquad", "xnli"])
    assert after["squad"] != before["squad"] and after["xquad"] != before["xquad"]
    assert after["xnli"] == before["xnli"]
    assert codehash.module_digest("data.prepare") == prepare


def test_relative_imports_resolve_against_the_importing_module(package_copy):
    """The package writes absolute imports; a relative one (one dot or two, from a module or
    a package's __init__) must resolve all the same."""
    stage = package_copy / "stage"
    stage.mkdir()
    (stage / "__init__.py").write_text("from . import leaf\n")
    (stage / "leaf.py").write_text("from ..common import LOG\nfrom .sibling import x\n")
    (stage / "sibling.py").write_text("x = 1\n")
    codehash._imports.cache_clear()
    assert set(codehash.import_closure("workflow_scripts.stage")) == {
        "workflow_scripts.stage",
        "workflow_scripts.stage.leaf",
        "workflow_scripts.stage.sibling",
        "workflow_scripts.common",  # (and its progress bars, which no closure holds: below)
        "workflow_scripts.spec.basics",  # common's own import
    }
    before = codehash.module_digest("stage")
    (stage / "sibling.py").write_text("x = 2\n")
    codehash._imports.cache_clear()
    assert codehash.module_digest("stage") != before


def test_modules_that_only_watch_a_job_rerun_nothing():
    """Progress bars and trackers observe a job without changing what it writes: editing them
    must not rerun the training grid, any more than switching tracking on does."""
    train = codehash.import_closure("workflow_scripts.training.train")
    assert "workflow_scripts.training.curves" in train  # the curve is an output: it counts
    assert not set(train) & codehash.OBSERVERS
    for observer in codehash.OBSERVERS:  # each is really imported by a step, and exists
        assert codehash._module_file(observer) is not None
    assert "workflow_scripts.progress" in codehash._imports("workflow_scripts.common")


def test_prose_edits_rerun_nothing_and_code_edits_rerun_their_dependents(package_copy):
    """Comments, docstrings and blank lines are not code: editing them leaves every digest as
    it was; a ``#`` inside a string is code."""
    metrics = package_copy / "evaluation" / "metrics.py"
    source = metrics.read_text(encoding="utf-8")
    before = codehash.module_digest("training.train")
    assert source.startswith('"""')  # the module's docstring, edited below
    prose = source.replace('"""', '"""A reworded opening. ', 1) + "\n\n# a closing remark\n"
    metrics.write_text(prose, encoding="utf-8")
    codehash._imports.cache_clear()
    assert codehash.module_digest("training.train") == before
    metrics.write_text(prose + 'MARKER = "# not a comment"\n', encoding="utf-8")
    codehash._imports.cache_clear()
    assert codehash.module_digest("training.train") != before


def test_code_text_cuts_comments_and_docstrings_only():
    source = (
        '"""Module prose."""\n'
        "import os  # why\n"
        'X = "a # kept"  # cut\n'
        "\n"
        "class A:\n"
        '    """Class prose,\n'
        '    two lines."""\n'
        "    def f(self):  # cut\n"
        "        '''f prose'''\n"
        '        return "été", X  # é cut\n'
    ).encode()
    assert codehash.code_text(source).decode("utf-8").splitlines() == [
        "import os",
        'X = "a # kept"',
        "class A:",
        "    def f(self):",
        '        return "été", X',
    ]
