"""Every installed capability has a contract document that agrees with its declaration."""

import pytest

from loopx.seam import capabilities
from loopx.testing import capability_doc_problems
from tests.conftest import ROOT

# The capabilities this repository ships (plugins/*) that are installed; a third-party capability
# installed into the same environment keeps its document in its own repository.
SHIPPED = {p.name for p in (ROOT / "plugins").iterdir() if (p / "pyproject.toml").is_file()}
INSTALLED = sorted(set(capabilities.load()) & SHIPPED)


@pytest.fixture(autouse=True)
def only_builtin_plugins():
    """This module checks what is installed, so it does not isolate the core from it (the
    suite-wide fixture of this name loads built-ins only)."""


def test_the_plugins_shipped_here_are_installed():
    # The documents below are checked against what is installed; make sure the repository's own
    # capabilities are among them (the CI installs every plugin of plugins/).
    assert SHIPPED <= set(INSTALLED), f"install them: pip install -e ./plugins/<name> ({SHIPPED - set(INSTALLED)})"


@pytest.mark.parametrize("name", INSTALLED)
def test_capability_has_a_matching_document(name):
    cap = capabilities.get(name)
    assert cap.doc == f"docs/capabilities/{name}.md"
    assert capability_doc_problems(name, ROOT) == []


@pytest.mark.parametrize("name", INSTALLED)
def test_capability_lists_its_commands_in_the_cli(name, loopx):
    cap = capabilities.get(name)
    listed = loopx("--help").out
    for command in cap.commands:
        assert command in listed, f"{name} declares command {command!r} but `loopx --help` does not list it"


def test_every_document_belongs_to_a_capability_of_this_repository():
    docs = {p.stem for p in (ROOT / "docs" / "capabilities").glob("*.md") if p.name != "README.md"}
    assert docs <= set(INSTALLED), f"documents without an installed capability: {docs - set(INSTALLED)}"


def test_a_missing_document_is_reported(tmp_path, loopx_plugin):
    from loopx import hookimpl

    class Undocumented:
        @hookimpl
        def loopx_register_capabilities(self, register):
            register(capabilities.Capability(name="undocumented", version="1", summary="S.", owns=["undocumented"]))

    loopx_plugin(Undocumented())
    assert capability_doc_problems("undocumented", ROOT) == [f"{ROOT}/docs/capabilities/undocumented.md does not exist"]


def test_the_guide_teaches_the_document_sections():
    guide = (ROOT / "docs" / "capabilities" / "README.md").read_text()
    for section in capabilities.DOC_SECTIONS:
        assert f"## {section}" in guide
    assert f"## {capabilities.DEFAULT_ON_SECTION}" in guide


def test_self_repair_is_the_one_default_on_capability_shipped_here_and_says_why():
    on = sorted(name for name in INSTALLED if capabilities.get(name).default_on)
    assert on == ["self_repair"]
    doc = (ROOT / capabilities.get("self_repair").doc).read_text()
    assert f"## {capabilities.DEFAULT_ON_SECTION}" in doc  # what check_doc compares with the declared why


@pytest.mark.parametrize("edit, complaint", [
    (lambda doc: doc.split("\n## On for every goal")[0], "has no '## On for every goal' section"),
    (lambda doc: doc.replace("damage can reach any goal", "it is convenient"), "does not give the declared why"),
])
def test_a_default_on_capability_whose_document_does_not_say_why_is_reported(edit, complaint):
    cap = capabilities.get("self_repair")
    doc = (ROOT / cap.doc).read_text()
    assert capabilities.check_doc(cap, doc) == []
    assert any(complaint in p for p in capabilities.check_doc(cap, edit(doc)))
    # And a capability that is not default-on may not claim the section.
    assert any("does not declare default_on" in p for p in capabilities.check_doc(cap.replace(default_on=False), doc))
