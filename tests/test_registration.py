"""One registration line per mechanism: ``@register("short", "Label")`` on the class and its
import in ``ldpdist.mechanisms``. Everything that lists the mechanisms is read from that
registry (the exports, the short names, the command line, the experiments, the shared test
suites); the lists that stay hand-written (the API reference, the mechanism pages, the guide's
comparison table, the type stubs of the core) are checked here against it, so that a mechanism
missing from one of them fails this file by name. The recipe is in docs/development.md
("Adding a mechanism")."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

import ldpdist
from ldpdist import cli, deploy, specs
from ldpdist.experiments import grid
from ldpdist.mechanisms import SHORT_NAMES
from test_edges import build

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
NAMES = list(specs.registered())


def test_every_mechanism_has_one_short_name_and_one_label():
    assert list(SHORT_NAMES.values()) == NAMES  # one short name each, in registration order
    assert SHORT_NAMES == specs.registered_short_names()
    assert set(specs.registered_labels()) == set(SHORT_NAMES)
    names = list(SHORT_NAMES) + [name.lower() for name in NAMES]
    # the command line takes either, case-insensitive: a short name that is also another
    # mechanism's class name would shadow it
    assert len(set(names)) == len(names) - sum(short == name.lower()
                                               for short, name in SHORT_NAMES.items())


@pytest.mark.parametrize("name", NAMES)
def test_every_mechanism_is_exported_and_listed(name):
    cls = specs.registered()[name]
    assert getattr(ldpdist, name) is cls and getattr(ldpdist.mechanisms, name) is cls
    assert name in ldpdist.__all__ and name in ldpdist.mechanisms.__all__
    assert name in ldpdist.__doc__


@pytest.mark.parametrize("short, name", list(SHORT_NAMES.items()))
def test_the_command_line_and_the_experiments_know_every_mechanism(short, name):
    assert deploy.mechanism_class(short.upper()) == name
    assert deploy.mechanism_class(name.lower()) == name
    assert grid.mechanism_key(name) == short
    assert grid.mechanism_label(short) == specs.registered_labels()[short]
    assert (short in grid._NOT_PRIVATE) == (not specs.registered()[name].private)


def _spec_argv(mech):
    """The ``ldpdist spec`` arguments that write ``mech``'s spec: one option per parameter
    that differs from the constructor's default (a partition that gives k: --block-sizes)."""
    spec = mech.to_dict()
    name = spec.pop("mechanism")
    spec.pop("format")
    argv = ["spec", name]
    defaults = deploy._parameters(name)
    for key, value in spec.items():
        default = defaults[key].default if key in defaults else None
        if key not in ("k", "epsilon") and value == default:
            continue
        option = key
        if name in deploy._K_FROM and key == "blocks":
            option = "block_sizes"
        assert option in ("k", "epsilon") or option in deploy._SPEC_OPTIONS, (
            f"`ldpdist spec` has no option for {name}'s parameter {key!r}: add one "
            "(python/ldpdist/deploy.py)")
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        argv += [f"--{option.replace('_', '-')}", str(value)]
    return argv


@pytest.mark.parametrize("name", NAMES)
def test_the_spec_command_writes_every_mechanism(capsys, name):
    """The shared suites' instance of each mechanism, written by ``ldpdist spec`` from its
    parameters, reads back equal (and every option the command takes for it is one of its
    constructor's parameters)."""
    mech = build(name, 12, 1.0)
    status = cli.main(_spec_argv(mech))
    out, err = capsys.readouterr()
    assert status == 0, err
    assert ldpdist.from_dict(json.loads(out)) == mech


def _autosummary_names(text):
    names = set()
    for block in re.findall(r"\.\. autosummary::\n(.*?)\n```", text, re.S):
        names |= {line.strip() for line in block.splitlines()
                  if line.strip() and not line.strip().startswith((":", ".."))}
    return names


@pytest.mark.parametrize("name", NAMES)
def test_the_docs_list_every_mechanism(name):
    """The API reference's autosummary, the mechanism pages' table "Every mechanism at a
    glance", a family page (docs/mechanisms/*.md) and the guide's comparison table."""
    assert name in _autosummary_names((DOCS / "reference" / "api.md").read_text()), (
        f"{name} is missing from the Mechanisms autosummary of docs/reference/api.md")
    role = f"{{py:class}}`~ldpdist.{name}`"
    assert role in (DOCS / "mechanisms" / "index.md").read_text(), (
        f"{name} has no row in docs/mechanisms/index.md's table")
    family = [page.name for page in (DOCS / "mechanisms").glob("*.md")
              if page.name != "index.md" and f"ldpdist.{name}`" in page.read_text()]
    assert family, f"no page of docs/mechanisms/ documents {name}"
    assert f"ldpdist.{name}`" in (DOCS / "guide" / "choosing.md").read_text(), (
        f"{name} is missing from docs/guide/choosing.md")


@pytest.mark.parametrize("name", NAMES)
def test_the_core_stubs_declare_every_mechanism_core(name):
    core = getattr(specs.registered()[name], "_core_class", None)
    if core is None:  # built another way (compressive privatization, public-coin hashing)
        pytest.skip(f"{name} has no single core class")
    stubs = (ROOT / "python" / "ldpdist" / "_core.pyi").read_text()
    assert re.search(rf"^class {core.__name__}\b", stubs, re.M), (
        f"python/ldpdist/_core.pyi does not declare {core.__name__} ({name})")


def test_register_takes_a_short_name_and_refuses_a_taken_one():
    class Mechanism:  # never registered: every refusal happens before the registry changes
        pass

    before = (specs.registered(), specs.registered_short_names())
    with pytest.raises(TypeError, match="short name"):
        specs.register(Mechanism)
    with pytest.raises(ValueError, match="lowercase identifier"):
        specs.register("Hr")
    with pytest.raises(ValueError, match="already taken"):
        specs.register("hr")(Mechanism)
    renamed = type("HR", (), {})  # a class name that is another mechanism's short name
    with pytest.raises(ValueError, match="already taken"):
        specs.register("newone")(renamed)
    assert (specs.registered(), specs.registered_short_names()) == before
