"""Sphinx configuration of the ldpdist documentation.

Build (warnings are errors, every cross-reference checked):

    python -m pip install ".[docs]"
    python -m sphinx -W --keep-going -n -b html docs docs/_build/html

Nothing is downloaded, at build time or when a page is read: no intersphinx, no remote
images, fonts or scripts (MathJax is copied into the site), and the API pages are generated
from the installed package's docstrings.
"""

from __future__ import annotations

import os

os.environ.setdefault("MPLBACKEND", "Agg")  # importing ldpdist.experiments imports matplotlib

import ldpdist

# -- project ---------------------------------------------------------------------------

project = "ldpdist"
author = "the ldpdist developers"
copyright = "the ldpdist developers"
version = ldpdist.__version__
release = ldpdist.__version__

# -- extensions ------------------------------------------------------------------------

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinxarg.ext",
    # MathJax served from the site itself (_static/mathjax), not from a CDN: the pages'
    # math renders offline.
    "sphinx-mathjax-offline",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = [
    "_build",
    # Markdown fragments (tables) written by docs/generate.py: they are included into
    # pages with {include}, never pages of their own.
    "generated",
    "generate.py",
    # Editor and OS droppings.
    "**/.ipynb_checkpoints",
    ".DS_Store",
]

# MyST: $...$ math, ::: fences, definition lists, anchors for headings down to ###.
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# -- API reference ---------------------------------------------------------------------

# reference/api.md lists the public objects in autosummary tables; one page per object is
# generated into reference/api/ at build time (not committed; see .gitignore).
autosummary_generate = True
autosummary_imported_members = False
autodoc_default_options = {
    "member-order": "groupwise",
}
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autoclass_content = "class"

# numpydoc: the class pages list their members through the autosummary templates in
# _templates/, so numpydoc's own member tables are off (they would duplicate them).
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# Every cross-reference must resolve (-n). The only exceptions are types of other
# packages, which cannot resolve because nothing is fetched at build time (no
# intersphinx): they appear in the signatures' type annotations.
nitpicky = True
nitpick_ignore = [
    ("py:class", "numpy.ndarray"),
    ("py:class", "numpy.dtype"),
    ("py:class", "np.ndarray"),  # annotations kept as written (not evaluated)
    ("py:class", "numpy.random.Generator"),
    ("py:class", "numpy.random._generator.Generator"),
    ("py:class", "numpy.random.SeedSequence"),
    ("py:class", "matplotlib.figure.Figure"),
    ("py:class", "matplotlib.axes.Axes"),
    ("py:class", "argparse.ArgumentParser"),
    ("py:class", "os.PathLike"),
    ("py:class", "dask.array.Array"),
    ("py:class", "dask.array.core.Array"),
    ("py:class", "dask.dataframe.Series"),
    ("py:class", "distributed.Client"),
]



# -- one name per object ---------------------------------------------------------------
#
# Objects are documented under their public names (``ldpdist.Aggregator``), but Python
# knows them by where they are defined (``ldpdist.mechanisms.aggregator.Aggregator``), and
# that is the name type annotations, base classes and docstrings in a module's own
# namespace produce. A reference that does not resolve as written is looked up again as the
# same *object*: if that object is documented under another name, the reference goes there.
# Anything that is not documented under any name still fails the build.


def _lookup(path: str):
    """The object a dotted path names, or None."""
    import importlib

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for part in parts[i:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


_DOCUMENTED: dict = {}  # (id(env), number of objects) -> names, for this process only


def _documented(env) -> dict:
    """id(object) -> the names it is documented under, shortest first (classes, functions
    and modules only: equal numbers or strings are not the same thing)."""
    key = (id(env), len(env.get_domain("py").objects))
    if key in _DOCUMENTED:
        return _DOCUMENTED[key]
    import inspect

    names: dict[int, list[str]] = {}
    for name in env.get_domain("py").objects:
        if not name.startswith("ldpdist"):
            continue
        obj = _lookup(name)
        if inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj):
            names.setdefault(id(obj), []).append(name)
    for value in names.values():
        value.sort(key=lambda n: (n.count("."), len(n)))
    _DOCUMENTED.clear()
    _DOCUMENTED[key] = names
    return names


def _resolve_by_identity(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    module = node.get("py:module") or ""
    cls = node.get("py:class") or ""
    candidates = [target]
    if cls:
        candidates.insert(0, f"{module}.{cls}.{target}" if module else f"{cls}.{target}")
    if module:
        candidates.insert(len(candidates) - 1, f"{module}.{target}")
    candidates.append(f"ldpdist.{target}")
    documented = _documented(env)
    domain = env.get_domain("py")
    import inspect
    import typing

    for candidate in candidates:
        parts = candidate.split(".")
        if not parts[0] == "ldpdist":
            continue
        # The longest prefix that names a documented object, then the rest of the path.
        for i in range(len(parts), 0, -1):
            obj = _lookup(".".join(parts[:i]))
            if obj is None:
                continue
            if i == len(parts) and isinstance(obj, typing.TypeVar):
                # A type variable in a signature has no page of its own: show its name.
                return contnode
            if not (inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)):
                continue
            for name in documented.get(id(obj), []):
                full = ".".join([name, *parts[i:]])
                if full in domain.objects:
                    node["reftarget"] = full
                    node["refspecific"] = False
                    return domain.resolve_xref(env, node["refdoc"], app.builder,
                                               node["reftype"], full, node, contnode)
    return None


def _public_bases(app, name, obj, options, bases):
    """Base classes defined in private modules (``ldpdist.linear._queries``) and not
    documented are implementation details: their documented members are shown on the
    subclass's page (``:inherited-members:``), so the base is not named."""
    bases[:] = [base for base in bases
                if not any(part.startswith("_") for part in base.__module__.split("."))]


def _numpydoc_warnings_count() -> None:
    """numpydoc reports a docstring it cannot parse (an unknown section, whose text it then
    drops from the page) with a Python ``UserWarning``, which ``-W`` does not see: pass
    those on to Sphinx's log, so that they fail the build like any other warning."""
    import warnings

    from sphinx.util import logging as sphinx_logging

    logger = sphinx_logging.getLogger("numpydoc")
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if "numpydoc" in str(filename):
            logger.warning("numpydoc: %s", message)
        else:
            show(message, category, filename, lineno, file, line)

    warnings.filterwarnings("always", category=UserWarning, module="numpydoc")
    warnings.showwarning = showwarning


def setup(app):
    _numpydoc_warnings_count()
    app.connect("missing-reference", _resolve_by_identity)
    app.connect("autodoc-process-bases", _public_bases)


# -- HTML ------------------------------------------------------------------------------

html_theme = "pydata_sphinx_theme"
html_title = f"ldpdist {release}"
html_static_path = ["_static"]
html_css_files = ["ldpdist.css"]
html_show_sourcelink = False
html_copy_source = False
html_last_updated_fmt = None

html_theme_options = {
    # The navbar holds the top-level sections of the root toctree (index.md).
    "navbar_align": "left",
    "header_links_before_dropdown": 7,
    "navbar_start": ["navbar-logo"],
    "navbar_center": ["navbar-nav"],
    "navbar_end": ["theme-switcher"],
    "navbar_persistent": ["search-button"],
    "icon_links": [],
    "show_prev_next": True,
    "show_toc_level": 2,
    # The sidebar lists a section's pages, not the API reference's one page per object
    # (the Python API page's tables and each page's own table of contents list those).
    "navigation_depth": 1,
    "collapse_navigation": False,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
    "logo": {"text": f"ldpdist {release}"},
    "pygments_light_style": "default",
    "pygments_dark_style": "github-dark",
}
toc_object_entries_show_parents = "hide"  # "estimate()", not "HadamardResponse.estimate()"
html_sidebars = {
    "index": [],
    "development": [],
    "performance": [],
    "accuracy": [],
}
html_context = {"default_mode": "light"}
