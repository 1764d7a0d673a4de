"""The estimators' docstrings: shared paragraphs written once, filled in, valid numpydoc."""

import inspect
from pathlib import Path

import pytest

import skbayes_sg
from skbayes_sg._docstrings import ATTRIBUTES, PARAMETERS, fill_docstring

ESTIMATORS = [
    "SGBayesLogisticRegression",
    "SGBayesLinearRegression",
    "SGBayesPoissonRegressor",
    "SGBayesDRBMClassifier",
]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_rendered_docstrings_are_numpydoc_and_document_every_parameter(name):
    docscrape = pytest.importorskip("numpydoc.docscrape")
    cls = getattr(skbayes_sg, name)
    assert "{" + "sampler}" not in cls.__doc__
    doc = docscrape.ClassDoc(cls)
    documented = [p.name for p in doc["Parameters"]]
    assert sorted(documented) == sorted(inspect.signature(cls).parameters)
    assert all(p.desc for p in doc["Parameters"])
    assert {"samples_", "diagnostics_", "n_iter_"} <= {a.name for a in doc["Attributes"]}


def test_shared_paragraphs_are_written_once_in_the_package():
    package = Path(skbayes_sg.__file__).parent
    sources = {p: p.read_text() for p in package.rglob("*.py") if p.name != "_docstrings.py"}
    for name, text in {**PARAMETERS, **ATTRIBUTES}.items():
        # The description, whatever its indentation: a paragraph that only starts alike (the
        # DRBM's own batch_size) is not a copy.
        words = " ".join(text.split()[3:])
        if len(words) < 100:
            continue  # a one-line attribute, as its property's own docstring says it
        copies = [p.name for p, s in sources.items() if words in " ".join(s.split())]
        assert not copies, f"the {name} paragraph is copied in {copies}"


def test_an_unknown_placeholder_is_an_error():
    class Est:
        """Doc.

        Parameters
        ----------
        {no_such_parameter}
        """

    with pytest.raises(KeyError, match="no_such_parameter"):
        fill_docstring(Est)


def test_quoted_costs_are_wall_times_not_cpu_times():
    # Issue 30 item 3: the DRBM's docs quoted "44 s ... under a minute of CPU", the parent
    # process's CPU time, where the whole fit took several times longer. Every cost the docs
    # quote is the wall time of the whole fit, with the machine named.
    import re

    root = Path(__file__).resolve().parents[1]
    files = [root / "README.md", *(root / "docs").rglob("*.rst"), *(root / "skbayes_sg").rglob("*.py")]
    cpu_cost = re.compile(r"(s|minutes?|seconds) of CPU\b|\bCPU s\b|\bfit CPU\b", re.IGNORECASE)
    quoted = [f"{p.relative_to(root)}: {m.group(0)}" for p in files for m in cpu_cost.finditer(p.read_text())]
    assert not quoted, quoted
