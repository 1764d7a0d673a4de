"""Mutation tests: the exact-posterior checks must fail for a sampler whose maths is off by 20%.

Each sampler's ingredients are mutated one at a time by a factor 0.8 or 1.25, by wrapping
the sub-step it calls *in its own module's namespace* (so nothing else sees the change):

- ``noise``: the ``diffusion`` argument of the O step (``ou_euler`` / ``ou_exact``), i.e.
  the variance ``2 A T h`` of the injected noise; for SGLD, which has no sub-steps, the
  variance of its ``sqrt(2 h T) xi`` (its normals are scaled by ``sqrt(factor)``). This is
  the weaker reading of "noise off by 20%": the amplitude moves by only ~11%.
- ``friction``: the ``friction`` argument of the O step (``A`` for SGHMC, ``xi`` for the
  thermostats), the diffusion left alone.
- ``control``: the noise control. SGHMC's ``B^`` (``noise_estimate="empirical"``), CCAdL's
  moving-average ``Sigma`` in its correction ``-h (h/2) beta Sigma p``, mCCAdL's C step
  (the ``scale`` of ``c_step``, ``Sigma~ = -scale Sigma``).

Each mutant runs the case of :data:`tests._exact.CASES` that
``test_samplers.py::test_samples_its_predicted_stationary_law`` checks, at the same seed,
and must fail that check (largest |z| beyond :data:`~tests._exact.Z_MAX`) while the
unmutated sampler passes it. The check covers the means and sds of ``theta`` and, where
the scheme has them, the mean kinetic temperature (SGHMC) and the mean ``xi``.

For the thermostats (SGNHT, CCAdL, mCCAdL) a scaled noise or friction is absorbed by
``xi`` *by design*: ``xi`` settles where the injected and removed energies balance
(Propositions 1 and 2 of the CCAdL paper hold for any ``A``, and a factor on the O step's
friction is undone by ``xi / factor``), so the posterior of ``theta`` does not move and
cannot reveal these mutants at any budget. What fails is the thermostat's mean ``xi``,
which moves to about ``factor * A + h sigma^2 / 2`` (noise) or ``xi / factor`` (friction).
The C step's factor moves ``xi`` by ``(1 - factor) h sigma^2 / 2``; ``Sigma`` is nearly
isotropic here, so ``theta``'s sds move by less than their MCSE.

Every mutant must also match the moments predicted *for the mutant*
(:func:`tests._exact.predicted_moments` with the factor), so each failure is the one the
maths predicts, not an accident of the seed.
"""

import numpy as np
import pytest

import skbayes_sg.samplers.ccadl as ccadl_module
import skbayes_sg.samplers.mccadl as mccadl_module
import skbayes_sg.samplers.sghmc as sghmc_module
import skbayes_sg.samplers.sgld as sgld_module
import skbayes_sg.samplers.sgnht as sgnht_module

from ._exact import CASES, Z_MAX, stationary_z, worst_z

FACTORS = (0.8, 1.25)

INGREDIENTS = {
    "sgld": ("noise",),
    "sghmc": ("noise", "friction"),
    "sghmc_empirical": ("noise", "friction", "control"),
    "sgnht": ("noise", "friction"),
    "ccadl": ("noise", "friction", "control"),
    "mccadl": ("noise", "friction", "control"),
}

_MODULES = {
    "SGLD": sgld_module,
    "SGHMC": sghmc_module,
    "SGNHT": sgnht_module,
    "CCAdL": ccadl_module,
    "MCCAdL": mccadl_module,
}


class _ScaledNormals:
    """A generator whose ``standard_normal`` draws are multiplied by ``scale``.

    SGLD draws its injected noise with ``rng.standard_normal`` and nothing else (the
    minibatch rows come from ``rng.integers``), so this scales exactly its noise term.
    """

    def __init__(self, rng, scale):
        self._rng, self._scale = rng, scale

    def standard_normal(self, *args, **kwargs):
        out = kwargs.get("out")
        draws = self._rng.standard_normal(*args, **kwargs)
        if out is not None:  # filled in place (the batched kernels' way)
            out *= self._scale
            return out
        return self._scale * draws

    def __getattr__(self, name):
        return getattr(self._rng, name)


def _scaled_o_step(o_step, ingredient, factor):
    """``o_step(p, friction, diffusion, delta, *rest)`` with its noise or friction scaled."""
    if ingredient == "noise":
        return lambda p, friction, diffusion, delta, *rest: o_step(p, friction, factor * diffusion, delta, *rest)
    return lambda p, friction, diffusion, delta, *rest: o_step(p, factor * friction, diffusion, delta, *rest)


def mutate(monkeypatch, sampler, ingredient, factor):
    """Patch ``sampler``'s module so that ``ingredient`` is multiplied by ``factor``.

    Parameters
    ----------
    monkeypatch : pytest.MonkeyPatch
    sampler : BaseSampler
    ingredient : {"noise", "friction", "control"}
    factor : float
    """
    name = type(sampler).__name__
    module = _MODULES[name]
    if name == "SGLD":
        assert ingredient == "noise", "SGLD has no friction and no noise control"
        step = module.SGLD.step

        def scaled_step(self, state, target, rng):
            return step(self, state, target, _ScaledNormals(rng, np.sqrt(factor)))

        step_batch = module.SGLD.step_batch

        def scaled_step_batch(self, chains, grads, rngs):
            return step_batch(self, chains, grads, [_ScaledNormals(rng, np.sqrt(factor)) for rng in rngs])

        monkeypatch.setattr(module.SGLD, "step", scaled_step)
        monkeypatch.setattr(module.SGLD, "step_batch", scaled_step_batch)
        return
    if ingredient in ("noise", "friction"):
        # The single-chain O step and its batched form (chains advancing together).
        o_name = "ou_exact" if name == "MCCAdL" else "ou_euler"
        for fn in (o_name, o_name + "_rows"):
            monkeypatch.setattr(module, fn, _scaled_o_step(getattr(module, fn), ingredient, factor))
        return
    assert ingredient == "control"
    if name == "SGHMC":
        # ou_euler receives A T - B^ (clipped at 1e-3 A T); scale B^ and clip again.
        AT = sampler.friction * sampler.temperature
        o_step = module.ou_euler

        def mutant(p, friction, diffusion, delta, rng):
            return o_step(p, friction, np.maximum(AT - factor * (AT - diffusion), 1e-3 * AT), delta, rng)

        monkeypatch.setattr(module, "ou_euler", mutant)
    elif name == "CCAdL":
        update = module._update_moving_average

        def mutant(state, grads):
            # The moving average itself stays intact; only the correction sees the factor.
            return factor * update(state, grads)

        monkeypatch.setattr(module, "_update_moving_average", mutant)
    elif name == "MCCAdL":
        c_step = module.c_step

        def mutant(p, grads, noise_scale, t, scale, *args, **kwargs):
            return c_step(p, grads, noise_scale, t, factor * scale, *args, **kwargs)

        monkeypatch.setattr(module, "c_step", mutant)
    else:
        raise ValueError(f"{name} has no noise control")


@pytest.fixture(scope="module")
def baseline():
    """z-scores of each unmutated case, run once and shared by all its mutants."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = CASES[name].z()[0]
        return cache[name]

    return get


PARAMS = [
    (name, ingredient, factor) for name in sorted(INGREDIENTS) for ingredient in INGREDIENTS[name] for factor in FACTORS
]


@pytest.mark.statistical
@pytest.mark.parametrize("name, ingredient, factor", PARAMS, ids=[f"{n}-{i}-{f}" for n, i, f in PARAMS])
def test_mutant_fails_the_exact_posterior_check(baseline, monkeypatch, name, ingredient, factor):
    case = CASES[name]
    z_base, where_base = worst_z(baseline(name))
    assert z_base < Z_MAX, f"the unmutated {name} fails its own check: {where_base} at {z_base:.1f} MCSE"
    with monkeypatch.context() as m:
        mutate(m, case.sampler, ingredient, factor)
        draws, stats, _ = case.run()
    # The same seed and the same check (stationary_z against the unmutated prediction) as
    # test_samplers.py::test_samples_its_predicted_stationary_law.
    z_mut, where = worst_z(stationary_z(draws, stats, case.mean, case.predict()))
    assert z_mut > Z_MAX, f"{name} with {ingredient} x{factor} passes: worst {where} at {z_mut:.1f} MCSE"
    # The failure is the predicted one: the mutant matches the moments predicted for it
    # (for a thermostat's noise or friction: the same posterior, xi moved).
    z_pred, where_pred = worst_z(stationary_z(draws, stats, case.mean, case.predict(**{ingredient: factor})))
    assert z_pred < Z_MAX, f"{name} with {ingredient} x{factor}: {where_pred} {z_pred:.1f} MCSE off its prediction"


# The mutants the issue reported as passing the old +-15% sd check: 25% less injected
# noise (in variance: the weaker reading), and SGHMC's B^ at 0, h Sigma or 2 h Sigma
# instead of h Sigma / 2. Their B^ is clipped often, so only the failure is asserted.
ISSUE_MUTANTS = [
    ("sgld", "noise", 0.75),
    ("sghmc", "noise", 0.75),
    ("sghmc_empirical", "control", 0.0),
    ("sghmc_empirical", "control", 2.0),
    ("sghmc_empirical", "control", 4.0),
]


@pytest.mark.statistical
@pytest.mark.parametrize("name, ingredient, factor", ISSUE_MUTANTS, ids=[f"{n}-{i}-{f}" for n, i, f in ISSUE_MUTANTS])
def test_the_issues_mutants_fail(monkeypatch, name, ingredient, factor):
    case = CASES[name]
    mutate(monkeypatch, case.sampler, ingredient, factor)
    draws, stats, _ = case.run()
    z_mut, where = worst_z(stationary_z(draws, stats, case.mean, case.predict()))
    assert z_mut > Z_MAX, f"{name} with {ingredient} x{factor} passes: worst {where} at {z_mut:.1f} MCSE"
