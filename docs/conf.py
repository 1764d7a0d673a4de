"""Sphinx configuration of the skbayes_sg documentation.

Build: ``sphinx-build -W -b html docs docs/_build/html`` (or ``docs/build.sh``). Set
``SKBAYES_SG_DOCS_QUICK=1`` to run the gallery examples at reduced size (as CI does).
"""

import os
import sys
from datetime import date

# The package is normally installed (pip install -e .); fall back to the source tree.
sys.path.insert(0, os.path.abspath(".."))
# Headless plotting for the gallery.
os.environ.setdefault("MPLBACKEND", "Agg")

import skbayes_sg  # noqa: E402

project = "skbayes_sg"
author = "skbayes_sg developers"
copyright = f"{date.today().year}, {author}"
release = skbayes_sg.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    # MathJax served from the built docs, not a CDN, so the maths renders offline
    # (issue 18; docs/build.sh checks that no page loads a script from the network).
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
# architecture_*.rst are sections of architecture.rst (pulled in by ``.. include::``), not pages.
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "requirements.txt", "build.sh", "architecture_*.rst"]
# No network in CI: no intersphinx. Cross-references to scikit-learn are written as text.
default_role = "literal"
# numpydoc renames each docstring's References citations; an unreferenced one (a reference
# listed but not cited in the text) is not an error worth failing the build for.
suppress_warnings = ["ref.citation"]

# Optional pages written by the benchmarks (Markdown, not parsed here): link them for
# download when present, so that the build does not depend on them.
_HERE = os.path.dirname(os.path.abspath(__file__))
_DOWNLOADS = {"gadmala_tables": "benchmarks_gadmala.md"}
rst_prolog = (
    "\n".join(
        f".. |{key}| replace:: :download:`{name} </{name}>`"
        if os.path.exists(os.path.join(_HERE, name))
        else f".. |{key}| replace:: ``docs/{name}`` (not yet written)"
        for key, name in _DOWNLOADS.items()
    )
    + "\n"
)

# -- API reference -------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {}
autodoc_member_order = "groupwise"
autodoc_typehints = "none"
# numpydoc renders the Parameters/Attributes sections; the class template lists members,
# so numpydoc's own member tables would duplicate them.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False


def _skip_sklearn_members(app, what, name, obj, skip, options):
    """Leave out members inherited from scikit-learn (get_params, score, metadata routing...).

    Their docstrings cross-reference scikit-learn's own glossary and labels, which do not
    exist here; the class pages say that the standard scikit-learn methods are available.
    """
    module = getattr(obj, "__module__", None) or ""
    if module.startswith("sklearn."):
        return True
    return skip


def _benchmark_figure_directive():
    # benchmarks/results/*.png are produced by scripts that are not run in CI; a figure that
    # has not been generated yet becomes a note saying how to make it, not a build error.
    from pathlib import Path

    from docutils import nodes
    from docutils.parsers.rst.directives.images import Figure

    class BenchmarkFigure(Figure):
        def run(self):
            env = self.state.document.settings.env
            rel = self.arguments[0]
            path = (Path(env.srcdir) / Path(env.docname).parent / rel).resolve()
            if path.exists():
                return super().run()
            note = nodes.note()
            note += nodes.paragraph(
                text=f"Figure {Path(rel).name} has not been generated yet: run the "
                "benchmark script named above to produce it."
            )
            return [note]

    return BenchmarkFigure


def setup(app):
    app.add_directive("benchmark-figure", _benchmark_figure_directive())
    app.connect("autodoc-skip-member", _skip_sklearn_members)


# -- Gallery -------------------------------------------------------------------------------
# The examples read SKBAYES_SG_DOCS_QUICK themselves (fewer iterations when it is set).

sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    # quickstart.py and every plot_*.py are executed; other scripts are only rendered.
    "filename_pattern": r"(plot_.*|quickstart)\.py$",
    "ignore_pattern": r"__init__\.py",
    "within_subsection_order": "FileNameSortKey",
    "doc_module": ("skbayes_sg",),
    "backreferences_dir": "gen_modules/backreferences",
    "reference_url": {"skbayes_sg": None},
    "remove_config_comments": True,
    "plot_gallery": "True",
    "abort_on_example_error": True,
    "show_memory": False,
    "min_reported_time": 1,
    # The computation-times pages load jQuery and DataTables from CDNs; the docs must read
    # offline (docs/build.sh checks), and the times are in the build log anyway.
    "write_computation_times": False,
}

# -- HTML ----------------------------------------------------------------------------------
try:
    import pydata_sphinx_theme  # noqa: F401

    html_theme = "pydata_sphinx_theme"
    html_theme_options = {
        "navigation_with_keys": False,
        "show_toc_level": 2,
        "secondary_sidebar_items": ["page-toc"],
    }
except ImportError:  # a plain build still works without the theme
    html_theme = "alabaster"
html_title = f"skbayes_sg {release}"
html_static_path = []
html_show_sourcelink = False

mathjax3_config = {"tex": {"macros": {"R": r"\mathbb{R}", "E": r"\mathbb{E}"}}}
