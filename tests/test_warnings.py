"""A fit issues at most one warning, naming the likeliest cause and its fix (issue 18, item 7)."""

import pathlib
import re
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import ConvergenceWarning

from skbayes_sg import GradientNoiseWarning, SGBayesLogisticRegression
from skbayes_sg._fit._messages import kinetic_temperature_message
from skbayes_sg.samplers import SGHMC, SGLD, MCCAdL

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def cancer():
    return load_breast_cancer(return_X_y=True)


def _fit_recording(est, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return caught


def test_one_warning_when_several_checks_fail(cancer):
    # At step 0.1 SGHMC runs millions of times too hot and its chains do not mix: the
    # temperature, R-hat and ESS checks all fail, and the user gets one warning whose first
    # sentence is the cause (the temperature), attributed to the caller's line.
    X, y = cancer
    # alpha=1.0: the prior per unit of the raw features (alpha="auto" would put precisions up to
    # 1e5 on them, and a hand-set step this large would diverge on the prior's force alone).
    caught = _fit_recording(
        SGBayesLogisticRegression(sampler=SGHMC(step_size=0.1), alpha=1.0, n_iter=400, random_state=0), X, y
    )
    assert len(caught) == 1, [str(w.message) for w in caught]
    w = caught[0]
    assert issubclass(w.category, GradientNoiseWarning) and issubclass(w.category, ConvergenceWarning)
    text = str(w.message)
    assert text.index("ran hotter") < text.index("R-hat")
    assert "step_size was set by hand" in text
    assert w.filename == __file__


@pytest.mark.parametrize("sampler", [SGHMC(), MCCAdL()], ids=["sghmc", "mccadl"])
def test_noise_controlling_sampler_is_not_advised_to_itself(cancer, sampler):
    # Chains that ran hot are advised a noise-controlling sampler (mCCAdL) unless that is
    # what they ran. The hot chains are made by hand: a default fit is at temperature.
    X, y = cancer
    est = SGBayesLogisticRegression(sampler=sampler, n_iter=200, random_state=0).fit(X, y)
    est.sample_stats_["kinetic_temperature"] = np.full_like(est.sample_stats_["kinetic_temperature"], 3.0)
    text = kinetic_temperature_message(est, est._sampler)
    assert text is not None and "ran hotter" in text
    assert ("(mccadl)" in text) == isinstance(sampler, SGHMC), text


def test_unscaled_features_are_named_as_the_cause_only_without_whitening(cancer):
    # breast cancer's columns have standard deviations 2e5 apart. Without the MAP-Hessian
    # whitening (a hand-set step keeps the user's coordinates) that is why the chains mix
    # badly: say standardise. Whitened, the chains are scale-free and the advice would be
    # wrong.
    X, y = cancer
    raw = _fit_recording(
        SGBayesLogisticRegression(sampler=SGLD(step_size=0.01), alpha=1.0, n_iter=400, random_state=0), X, y
    )
    assert len(raw) == 1 and issubclass(raw[0].category, ConvergenceWarning)
    assert re.search(r"scales differ by a factor of [\d.e+]+: standardise", str(raw[0].message))
    whitened = _fit_recording(
        SGBayesLogisticRegression(
            sampler=SGLD(step_size=1e-4, preconditioner="dense"), alpha=1.0, n_iter=400, random_state=0
        ),
        X,
        y,
    )
    assert len(whitened) == 1 and "standardise" not in str(whitened[0].message)
    assert "step_size=0.0001 was set by hand" in str(whitened[0].message)


def test_readme_usage_snippet_runs_without_warnings():
    # The README's "Use" block is what a new user pastes first: it must run as written and
    # converge, so that it prints nothing.
    text = README.read_text()
    block = re.search(r"## Use\s+```python\n(.*?)```", text, re.S).group(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        namespace = {}
        exec(compile(block, str(README), "exec"), namespace)
    mean, std = namespace["mean"], namespace["std"]
    assert np.all(np.isfinite(mean)) and np.all(std > 0)
