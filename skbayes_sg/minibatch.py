"""Noisy gradients of a model's log posterior from minibatches: what a sampler sees.

A sampler never touches the data. It calls ``target.gradient(theta, rng)`` and gets the
noisy force ``F~(theta) = grad log pi~(theta)`` (the negative of the paper's
``grad U~``) with the minibatch's per-example gradients; ``target.noise_scale`` turns
their empirical covariance ``V`` into the force's noise covariance ``Sigma``.

Multilevel SGLD (:mod:`skbayes_sg.multilevel`) steps stacks of coupled paths whose
minibatches it shares between them: it draws the rows (``target.draw_rows``) and asks for
the same force for all paths at once at those rows (``target.gradient_paths``).
"""

from dataclasses import dataclass

import numpy as np

from .models._fused import fused_force
from .models._fused_minibatch import fused_minibatch
from .models._gradients import DensePerExampleGradients

#: Minibatch schemes accepted by :class:`MinibatchGradient`.
BATCH_SCHEMES = ("replacement", "epochs")

#: Estimator values of ``gradient`` (see :func:`gradient_kind`).
GRADIENTS = ("auto", "minibatch", "control_variate")


class RowDistribution:
    """A distribution over the ``N`` rows for importance-sampled minibatches.

    Holds the probabilities ``p`` and Walker's alias table (Vose's O(N) build, once per
    fit, vectorised: :func:`_alias_table`): a draw is O(1), against O(log N) for a binary
    search of the cumulative sum, which on a9a took a tenth of a default fit.

    Parameters
    ----------
    p : ndarray of shape (N,)
        Probabilities (normalised here).
    copy : bool, default=True
        False: ``p``, a float array the caller gives away, is normalised in place (no second
        N-vector on large data).
    """

    def __init__(self, p, copy=True):
        p = np.asarray(p, dtype=float)
        if copy:
            self.p = p / p.sum()
        else:
            p /= p.sum()
            self.p = p
        self.accept, self.alias = _alias_table(self.p)
        impossible = self.p == 0
        if impossible.any():
            # Rows of probability zero (zero likelihood weight) must never be drawn, even if
            # rounding left one among the rows whose columns the sweep did not fill.
            N = self.p.size
            self.accept[impossible] = 0.0
            leftover = impossible & (self.alias == np.arange(N))
            self.alias[leftover] = int(np.argmax(self.p))

    def __getstate__(self):
        # The importance weights are rebuilt on demand, not stored or shipped.
        state = dict(self.__dict__)
        state.pop("_weights", None)
        return state

    def importance_weights(self, n_samples):
        """``c_i = 1 / (N p_i)`` (0 for rows of probability zero, which are never drawn): the
        weights that keep an importance-sampled force unbiased. Computed once and shared by every
        chain's estimator, so a group of chains holds (and ships) one copy."""
        cached = getattr(self, "_weights", None)
        if cached is None or cached[0] != n_samples:
            with np.errstate(divide="ignore"):
                c = 1.0 / (n_samples * self.p)
            c[self.p == 0] = 0.0
            cached = self._weights = (n_samples, c)
        return cached[1]

    def draw(self, rng, size):
        """Row indices of shape ``size``."""
        i = rng.integers(0, self.accept.size, size=size)
        return np.where(rng.random(size=size) < self.accept[i], i, self.alias[i])


def _alias_table(p):
    """Walker's alias table ``(accept, alias)`` of the probabilities ``p`` (summing to 1), vectorised.

    Vose's construction pairs the rows below the mean (``small``, deficit ``d = 1 - N p_i``)
    with those above it (``large``, excess ``e = N p_j - 1``), each taken from the end of
    its list: one large row fills smalls until its excess is spent, then it becomes a small
    itself, filled by the next large. That order is a sweep of two cumulative sums: with
    ``D_k`` the deficits of the first ``k`` smalls and ``E_j`` the excesses of the first
    ``j`` larges, small ``k`` is filled by the first large with ``E_j >= D_(k-1)``, and
    large ``j`` runs out at the first small with ``D_k > E_j``, keeping ``1 - (D_k - E_j)``
    of its own column and filled by large ``j + 1``. Both are read off one search of the
    larges (the fewer rows on skewed ``p``), ``s_j = #{k: D_k <= E_j}``: large ``j`` runs
    out at small ``s_j``, and small ``k``'s filler is ``#{j: E_j < D_(k-1)} = #{j: s_j + 1 <= k}``,
    a cumulative count. A Python loop over the N rows took 2.5 s at N = 1e6. Rows the sweep
    leaves (rounding at the end of either list) keep their own column whole.

    The set-up of a large fit allocates little here (the probabilities scaled in place into
    ``accept``, the temporaries freed as soon as they are spent): on a virtual machine a first
    touch of fresh memory costs more than the arithmetic.
    """
    N = p.size
    # The default index dtype: with int32 rows the chains' draws (np.where of int64 and int32,
    # on the arrays a worker process maps) made a fit's chains 20% slower at N = 1e6.
    alias = np.arange(N)
    accept = p * N
    below = accept < 1.0
    small = alias[below][::-1]
    np.logical_not(below, out=below)
    large = alias[below][::-1]
    del below
    if small.size == 0 or large.size == 0:
        accept.fill(1.0)
        return accept, alias
    D = accept[small]
    np.subtract(1.0, D, out=D)
    np.cumsum(D, out=D)
    E = accept[large]
    E -= 1.0
    np.cumsum(E, out=E)
    # Large j (but the last) that runs out within the deficits (E_j < D_last, a prefix: E is
    # sorted) becomes a small of large j + 1, at the first small k = s_j with D_k > E_j.
    n_spent = int(np.searchsorted(E[:-1], D[-1], side="left"))
    spent = large[:n_spent]
    s = np.searchsorted(D, E, side="right")
    # accept holds N p: the filled smalls keep it, every other row is set.
    accept[spent] = 1.0 - (D[s[:n_spent]] - E[:n_spent])
    del D, E
    # Small k's filler: the number of larges whose excess is spent before the deficits of the
    # smalls before k (E_j < D_(k-1), that is s_j + 1 <= k; D_(-1) = 0 <= every E_j).
    np.minimum(s, small.size - 1, out=s)
    s += 1
    filler = np.bincount(s, minlength=small.size + 1)
    del s
    np.cumsum(filler, out=filler)
    n_filled = int(np.searchsorted(filler[: small.size], large.size))  # sorted: the rest find no large left
    accept[large[n_spent:]] = 1.0
    accept[small[n_filled:]] = 1.0
    alias[small[:n_filled]] = large[filler[:n_filled]]
    alias[spent] = large[1 : n_spent + 1]
    return accept, alias


class MinibatchGradient:
    """Stochastic gradients of ``model``'s log posterior.

    Parameters
    ----------
    model : Model
    batch_size : int or None
        Rows per minibatch ``n``; ``None`` uses all ``N`` rows (no gradient noise).
    scheme : {"replacement", "epochs"}, default="replacement"
        ``"replacement"``: every minibatch is ``n`` rows drawn uniformly with replacement,
        as in the papers; the force is ``N/n sum_i g_i + grad log prior`` and its noise
        covariance is ``Sigma = N^2 / n * V`` (CCAdL paper eq. 17). Random row gathers are
        memory-bound on large X.
        ``"epochs"``: the rows (in the order the model holds them; the estimator shuffles
        them once) are cut into ``q = N // n`` contiguous blocks of near-equal size, and each
        epoch visits every block once in a fresh random order. A block is a slice, a view
        with no copy, which is several times faster on large data. The force is
        ``q sum_{i in block} g_i + grad log prior``, unbiased because every row is in exactly
        one block; sampling without replacement multiplies the noise covariance by the
        finite-population factor ``1 - n/N``. The partition into blocks stays fixed.

    Attributes
    ----------
    n_samples, n_params : int
        N and P of the model.
    batch_size : int
        The ``n`` in use (N for full data).
    noise_scale : float
        Factor ``c`` with ``Sigma = c V``: ``N^2 / n`` (replacement), ``N^2 / n (1 - n / N)``
        (epochs), 0 for full data.
    n_grad_evals : int
        Per-example gradient evaluations so far (the papers' cost unit).
    """

    _block = 256  # minibatches of indices drawn per call to the generator
    _evals_per_row = 1  # per-example gradient evaluations a row costs
    #: Whether the noise covariance changes at the scale a chain moves (see
    #: :class:`~skbayes_sg.samplers.MCCAdL`'s ``sigma_refresh``). Plain minibatch gradients:
    #: no, ``Sigma(theta)`` depends on ``theta`` through the rows' residuals, which barely move
    #: across a posterior of width ``O(N^-1/2)``.
    position_dependent_noise = False
    #: Whether this is a control-variate estimator, whose per-example noise
    #: ``g_i(theta) - g_i(theta_hat)`` is small: :class:`~skbayes_sg.samplers.MCCAdL`'s
    #: ``sigma_estimate="auto"`` then estimates ``Sigma`` from the force's own minibatch.
    control_variate = False

    def __init__(self, model, batch_size=None, scheme="replacement", row_probabilities=None):
        if scheme not in BATCH_SCHEMES:
            raise ValueError(f"batch scheme must be one of {BATCH_SCHEMES}; got {scheme!r}.")
        self.model = model
        self.n_samples = N = model.n_samples
        self.n_params = model.n_params
        # Rows drawn from a distribution are a sample even when there are more than N of them.
        self.full = batch_size is None or (batch_size >= N and row_probabilities is None)
        self.batch_size = N if self.full else int(batch_size)
        self.scheme = scheme
        self.n_grad_evals = 0
        n = self.batch_size
        if self.full:
            self.noise_scale = 0.0
        elif scheme == "replacement":
            self.noise_scale = N * N / n
        else:
            self.noise_scale = N * N / n * (1.0 - n / N)
            q = N // n
            self._bounds = np.linspace(0, N, q + 1).round().astype(np.intp)
            self._n_blocks = q
        self._queue = []
        self._queue_rng = None
        #: Generator states just before and just after the last refill (set when the model's
        #: rows are prefetched, see :meth:`draw_queue`).
        self.refill_states = None
        self._rows_dist = self._row_scale = None
        if row_probabilities is not None and not self.full and scheme == "replacement":
            dist = row_probabilities
            self._rows_dist = dist if isinstance(dist, RowDistribution) else RowDistribution(dist)
            # c_i = 1 / (N p_i): the importance weight that keeps (N/n) sum_S c_i g_i unbiased.
            self._row_scale = self._rows_dist.importance_weights(N)

    def detach_rows(self):
        """Remove the per-row arrays (the row distribution and importance weights, O(N)) and
        return them for :meth:`attach_rows`: a chain shipped to a worker process each round
        travels without them, and the arrays, shared by the chains, travel once beside it."""
        held = (self._rows_dist, self._row_scale)
        self._rows_dist = self._row_scale = None
        return held

    def attach_rows(self, held):
        """Give back the arrays of :meth:`detach_rows`."""
        self._rows_dist, self._row_scale = held

    def _next_rows(self, rng):
        """Rows of the next minibatch and the factor that turns their gradient sum into N x mean."""
        if self.full:
            return slice(None), 1.0
        if not self._queue:
            # The generator's state before the refill rebuilds the queue exactly
            # (queue_state), so a saved chain can continue bit-identically without
            # storing hundreds of queued minibatches.
            self._queue_rng = rng.bit_generator.state
            self._fill_queue(rng)
        item = self._queue.pop()
        if self.scheme == "replacement":
            return item, self.n_samples / self.batch_size
        return slice(self._bounds[item], self._bounds[item + 1]), float(self._n_blocks)

    def draw_queue(self, rng):
        """The rows of a queue of minibatches drawn from ``rng``, shape ``(block, batch_size)``:
        what a refill draws (with replacement, uniformly or with the row probabilities)."""
        if self._rows_dist is not None:
            return self._rows_dist.draw(rng, (self._block, self.batch_size))
        return rng.integers(0, self.n_samples, size=(self._block, self.batch_size))

    def _fill_queue(self, rng):
        if self.scheme == "replacement":
            batches = self.draw_queue(rng)
            prefetch = getattr(self.model, "prefetch_rows", None)
            if prefetch is not None:
                # The rows of the whole queue are known now: a model whose rows live elsewhere
                # (on a cluster) fetches them in one bulk request, not one per minibatch. The
                # generator's states around the refill let it draw the next queue ahead, on a
                # copy of the generator, and fetch its rows while the chains compute.
                self.refill_states = (self._queue_rng, rng.bit_generator.state)
                prefetch(batches, owner=self)
            self._queue = list(batches)
        else:
            self._queue = list(rng.permutation(self._n_blocks))
        self._queue.reverse()

    def queue_state(self):
        """The minibatches drawn but not yet used, as plain values (None if there are none).

        A dict of the generator's ``bit_generator.state`` before the queue was drawn and
        the number of minibatches still queued; :meth:`restore_queue` rebuilds them.
        """
        if not self._queue:
            return None
        return {"rng": self._queue_rng, "remaining": len(self._queue)}

    def restore_queue(self, saved):
        """Rebuild the queue of :meth:`queue_state` (None: an empty queue)."""
        self._queue = []
        if saved is None:
            return
        rng = np.random.Generator(getattr(np.random, saved["rng"]["bit_generator"])())
        rng.bit_generator.state = saved["rng"]
        self._queue_rng = saved["rng"]
        self._fill_queue(rng)
        del self._queue[saved["remaining"] :]

    def gradient(self, theta, rng):
        """Noisy force ``F~(theta)`` (P,) and the minibatch's per-example gradients.

        Returns
        -------
        force : ndarray of shape (P,)
            ``scale * sum_i g_i + grad log prior(theta)``, an unbiased estimate of the
            full-data gradient of the log posterior.
        grads : PerExampleGradients
        """
        rows, scale = self._next_rows(rng)
        return self._force_at(theta, rows, scale)

    def _force_at(self, theta, rows, scale):
        """The force at ``theta`` from the given rows, and their per-example operator."""
        grads = self._per_example(theta, rows)
        self._count(grads)
        force = self._data_term(theta, grads, scale)
        force += self.model.grad_log_prior(theta)
        return force, grads

    def draw_rows(self, rng, n_paths):
        """Rows of ``n_paths`` independent minibatches, one per row of the result.

        Drawn with replacement, uniformly or with the estimator's ``row_probabilities``,
        for :meth:`gradient_paths`. Callers that couple several paths (multilevel SGLD's
        fine and coarse paths) draw the rows themselves so that the paths can share them.

        Parameters
        ----------
        rng : numpy.random.Generator
            The stream the rows are drawn from.
        n_paths : int
            Minibatches to draw.

        Returns
        -------
        ndarray of int of shape (n_paths, n) or None
            None for the full data.
        """
        if self.full:
            return None
        if self.scheme != "replacement":
            raise ValueError("path stacks draw their rows with replacement; scheme='epochs' is for single chains.")
        if self._rows_dist is not None:
            return self._rows_dist.draw(rng, (n_paths, self.batch_size))
        return rng.integers(0, self.n_samples, size=(n_paths, self.batch_size))

    def gradient_paths(self, thetas, rows):
        """Noisy forces at a stack of parameter vectors, each from the rows the caller chose.

        The force of :meth:`gradient` for every row of ``thetas`` at once, vectorised over
        paths and minibatch rows (multilevel SGLD steps thousands of short paths
        together). With ``n`` rows per path the likelihood part is scaled by ``N / n``, so
        each force is unbiased when its rows are ``n`` independent draws of
        :meth:`draw_rows`.

        Parameters
        ----------
        thetas : ndarray of shape (M, P)
            One parameter vector per path.
        rows : ndarray of int of shape (M, n), or None
            Path ``m``'s minibatch rows; None uses all ``N`` rows for every path.

        Returns
        -------
        ndarray of shape (M, P)
            ``F~(thetas[m])`` from ``rows[m]``. Counts the per-example gradient evaluations
            as :meth:`gradient` does.
        """
        thetas = np.asarray(thetas, dtype=float)
        if rows is not None and self._row_scale is not None:
            # Importance weights live in the per-example operators: path by path.
            scale = self.n_samples / rows.shape[1]
            return np.stack([self._force_at(theta, r, scale)[0] for theta, r in zip(thetas, rows)])
        if rows is None:
            rows = np.broadcast_to(np.arange(self.n_samples), (thetas.shape[0], self.n_samples))
        scale = self.n_samples / rows.shape[1]
        force = self.model.grad_log_prior_paths(thetas)
        self._add_data_term_paths(force, thetas, rows, scale)
        self.n_grad_evals += self._evals_per_row * rows.size
        return force

    def _add_data_term_paths(self, out, thetas, rows, scale):
        """Adds :meth:`_data_term` of every path to ``out`` (M, P), in place."""
        out += scale * self.model.loglik_grad_paths(thetas, rows)

    def noise_gradients(self, theta, rng):
        """Per-example gradients at ``theta`` of a fresh minibatch, used by no force.

        For estimates of the noise covariance ``Sigma`` that must be independent of the
        noise in the forces (mCCAdL's C step); counts ``n`` gradient evaluations.
        """
        rows, _ = self._next_rows(rng)
        grads = self._per_example(theta, rows)
        self._count(grads)
        return grads

    def _count(self, grads):
        self.n_grad_evals += self._evals_per_row * grads.n_batch

    def _per_example(self, theta, rows):
        """The operator whose mean times ``N`` is this estimator's data term."""
        grads = self._operator(theta, rows)
        if self._row_scale is not None:
            grads = grads.scale_rows(self._row_scale[rows])
        return grads

    def _operator(self, theta, rows):
        return self.model.per_example_gradients(theta, rows)

    def _data_term(self, theta, grads, scale):
        """The estimate of the full-data log-likelihood gradient from ``grads``."""
        return grads.mean() * (scale * grads.n_batch)

    def log_posterior_and_grad(self, theta):
        """Full-data log posterior and gradient (counts N gradient evaluations)."""
        self.n_grad_evals += self.n_samples
        return self.model.log_posterior_and_grad(theta)


class ControlVariateGradient(MinibatchGradient):
    """Minibatch gradients with a control variate centred at ``theta_hat``.

    Baker, Fearnhead, Fox & Nemeth (2019), "Control variates for stochastic gradient
    MCMC", eq. (3):

    ``F~(theta) = grad log p(theta) + g_full(theta_hat) + (N/n) sum_{i in S} [g_i(theta) - g_i(theta_hat)]``

    with ``g_full(theta_hat)`` the full-data log-likelihood gradient, computed once. It is
    unbiased for any ``theta_hat``; its noise is that of the *differences*
    ``g_i(theta) - g_i(theta_hat) ~ H_i (theta - theta_hat)``, so it vanishes at
    ``theta_hat`` and, with ``theta_hat`` the MAP, stays of order ``N^2/n * ||theta -
    theta_hat||^2 Var_i[H_i]``: in posterior units ``O(P / n)`` whatever ``N`` (their
    section 3.2), where the plain estimator's grows like ``N / n``. The per-example
    operator the samplers see is that of the differences, so noise-aware samplers (the
    covariance control of CCAdL and mCCAdL, SGHMC's noise estimate) estimate the noise of
    the force they are actually given.

    Parameters
    ----------
    model : Model
    batch_size : int or None
    scheme : {"replacement", "epochs"}
    theta_hat : ndarray of shape (P,)
        Centre of the control variate, the MAP.
    g_hat : ndarray of shape (P,), optional
        ``g_full(theta_hat)`` when already known (it costs a full-data pass).
    row_probabilities : ndarray of shape (N,) or RowDistribution, optional
        Sample rows (with replacement) with these probabilities ``p_i`` instead of
        uniformly, each weighted by ``c_i = 1 / (N p_i)`` so the force stays unbiased
        (importance sampling; the operator the samplers see holds the weighted rows, so
        ``Sigma = N^2 / n Cov_p[c_i d_i]`` is still ``noise_scale`` times its covariance).
        The estimators use the rows' leverages at the MAP (``w_i x~_i' H^-1 x~_i``,
        :meth:`skbayes_sg.models.LogisticModel.leverage_scores`) mixed with 5% uniform:
        the difference ``d_i`` of row ``i`` is about ``w_i x~_i x~_i' (theta - theta_hat)``,
        whose typical whitened size is its leverage, so this is the variance-minimising
        choice to first order. On a9a, where a rare binary feature's few rows make its
        coordinate's noise ``N / (n k)`` for ``k`` rows under uniform sampling, it lowers
        ``sigma_max`` from about 25 to about 2 and ``tr(Sigma)`` from 280 to 42
        (whitened units, n = 200). The ``c_i`` are bounded by 20 by the uniform part.
        Ignored for ``scheme="epochs"``.
    """

    _evals_per_row = 2  # a difference evaluates each row's gradient at two points
    #: The differences' covariance is quadratic in ``theta - theta_hat``: it changes as fast
    #: as the chain moves.
    position_dependent_noise = True
    control_variate = True

    def __init__(
        self, model, batch_size=None, scheme="replacement", theta_hat=None, g_hat=None, row_probabilities=None
    ):
        super().__init__(model, batch_size, scheme, row_probabilities)
        self.theta_hat = np.array(theta_hat, dtype=float)
        if g_hat is None:
            g_hat = model.log_likelihood_and_grad(self.theta_hat)[1]
            self.n_grad_evals += self.n_samples
        self.g_hat = np.array(g_hat, dtype=float)

    def _operator(self, theta, rows):
        return self.model.per_example_gradient_differences(theta, self.theta_hat, rows)

    def _data_term(self, theta, grads, scale):
        out = grads.mean() * (scale * grads.n_batch)
        out += self.g_hat
        return out

    def _add_data_term_paths(self, out, thetas, rows, scale):
        out += self.g_hat
        centre = np.broadcast_to(self.theta_hat, thetas.shape)
        out += scale * (self.model.loglik_grad_paths(thetas, rows) - self.model.loglik_grad_paths(centre, rows))


class TaylorControlVariateGradient(ControlVariateGradient):
    """Minibatch gradients with a second-order (Taylor) control variate centred at ``theta_hat``.

    Nagapetyan, Szpruch, Vollmer, Zygalakis & Giles (2017), "Multilevel Monte Carlo for
    scalable Bayesian computations", section 3.4, eq. (11): the full-data gradient ``g_hat``
    and Hessian ``H_hat`` of the log likelihood at ``theta_hat`` give its linearisation
    exactly, and only the remainder is subsampled,

    ``F~(theta) = grad log p(theta) + g_hat + H_hat (theta - theta_hat)
    + (N/n) sum_{i in S} [g_i(theta) - g_i(theta_hat) - H_i(theta_hat) (theta - theta_hat)]``.

    It is unbiased for any ``theta_hat``, like :class:`ControlVariateGradient` (the
    first-order one, whose per-example differences it corrects by their linear part);
    its noise is that of the Taylor remainders, ``O(||theta - theta_hat||^2)`` per row
    where the first-order differences are ``O(||theta - theta_hat||)``: the multilevel
    SGLD paths start at ``theta_hat`` and stay within ``O(N^-1/2)`` of it, and it makes
    their cost grow sublinearly in ``N`` (the paper's Figure 3b). Each force applies the
    ``P x P`` matrix ``H_hat`` (O(P^2), against O(n P) for the minibatch). The per-example
    operator the samplers see holds the remainders as an explicit ``n x P`` matrix.

    Parameters
    ----------
    model : Model
    batch_size : int or None
    scheme : {"replacement", "epochs"}
    theta_hat : ndarray of shape (P,)
        Centre of the control variate and expansion point (the MAP in the paper).
    g_hat : ndarray of shape (P,), optional
        Full-data log-likelihood gradient at ``theta_hat``, when already known.
    row_probabilities : ndarray of shape (N,) or RowDistribution, optional
        As in :class:`ControlVariateGradient`.
    H_hat : ndarray of shape (P, P), optional
        Full-data log-likelihood Hessian at ``theta_hat`` (negative semi-definite for a
        log-concave likelihood), when already known; computed here otherwise.
    """

    def __init__(
        self,
        model,
        batch_size=None,
        scheme="replacement",
        theta_hat=None,
        g_hat=None,
        row_probabilities=None,
        H_hat=None,
    ):
        super().__init__(model, batch_size, scheme, theta_hat, g_hat, row_probabilities)
        if H_hat is None:
            H_hat = model.loglik_hessian(self.theta_hat)
            self.n_grad_evals += self.n_samples
        self.H_hat = np.asarray(H_hat, dtype=float)
        # Per-row linear predictors and residuals at theta_hat (GLMs): one full-data pass
        # here, so that each remainder needs the minibatch at theta only.
        self._cache = model.taylor_cache(self.theta_hat)

    def _operator(self, theta, rows):
        rows = np.arange(self.n_samples)[rows]
        # One "path" per row: the remainders of the rows one by one, (n, P).
        paths = np.broadcast_to(theta, (rows.size, theta.size))
        return DensePerExampleGradients(
            self.model.taylor_remainder_paths(paths, self.theta_hat, rows[:, None], self._cache)
        )

    def _data_term(self, theta, grads, scale):
        out = super()._data_term(theta, grads, scale)
        out += self.H_hat @ (theta - self.theta_hat)
        return out

    def _add_data_term_paths(self, out, thetas, rows, scale):
        out += self.g_hat
        out += (thetas - self.theta_hat) @ self.H_hat
        out += scale * self.model.taylor_remainder_paths(thetas, self.theta_hat, rows, self._cache)


def gradient_kind(gradient, batch_size, n_samples, auto_control_variate=True):
    """The gradient estimator a fit's chains use: ``"full"``, ``"minibatch"`` or ``"control_variate"``.

    Full data when ``batch_size`` is None or covers the ``n_samples`` rows; else the estimator's
    ``gradient`` (one of :data:`GRADIENTS`), ``"auto"`` meaning the control variate when the
    model's posterior has a meaningful centre (``auto_control_variate``) and plain minibatches
    otherwise (the DRBM, multimodal by construction).
    """
    if batch_size is None or batch_size >= n_samples:
        return "full"
    if gradient == "auto":
        return "control_variate" if auto_control_variate else "minibatch"
    return gradient


@dataclass(frozen=True)
class GradientSpec:
    """The gradient estimator every chain of a fit builds for itself (each its own minibatch queue).

    The one place a chain's gradient estimator is chosen: :meth:`build` gives a
    :class:`ControlVariateGradient` centred at ``centre`` when there is one, a
    :class:`MinibatchGradient` otherwise (``batch_size`` None: the full data).

    Attributes
    ----------
    batch_size : int or None
    scheme : {"replacement", "epochs"}
    row_probabilities : RowDistribution or None
        The minibatches' importance-sampling distribution (None: uniform).
    centre, g_hat : ndarray of shape (P,) or None
        The control variate's centre and the full-data log-likelihood gradient there.
    """

    batch_size: object = None
    scheme: str = "replacement"
    row_probabilities: object = None
    centre: object = None
    g_hat: object = None

    def build(self, model):
        """A new gradient estimator of ``model``."""
        if self.centre is None:
            return MinibatchGradient(model, self.batch_size, self.scheme, self.row_probabilities)
        return ControlVariateGradient(
            model, self.batch_size, self.scheme, self.centre, self.g_hat, self.row_probabilities
        )


class ChainsGradient:
    """The gradient estimators of a group of chains, as one: the forces of all of them at once.

    What a sampler's batched kernel (``step_batch``) sees. With full-data gradients and a model
    whose force can be fused (:func:`skbayes_sg.models.fused_force`: a one-output GLM, whitened
    or not, rows in memory) the forces of all the chains are two products per chain with no row
    gather; otherwise each chain's own estimator computes its force from its own minibatch queue
    and generator, as when the chain runs alone.

    Parameters
    ----------
    estimators : list of MinibatchGradient
        One per chain, each with its model attached.
    """

    def __init__(self, estimators):
        self.estimators = estimators
        first = estimators[0]
        self.model = first.model
        self.noise_scale = first.noise_scale
        self.full = all(e.full for e in estimators)
        self._fused = fused_force(self.model) if self.full else None
        # The estimators' default minibatch path (control variates, a dense whitening, rows held
        # here) for all the chains at once; each chain still draws its rows from its own queue.
        self._fused_minibatch = None if self.full else _fused_control_variates(estimators)
        if self._fused_minibatch is not None:
            self._idx = np.empty((len(estimators), first.batch_size), dtype=np.intp)
        #: Whether the forces draw from the chains' generators (minibatches, or any estimator's).
        self.uses_generators = self._fused is None

    def forces(self, thetas, rngs, out, per_example=False):
        """The forces at the rows of ``thetas`` (C, P), chain ``c`` drawing from ``rngs[c]``, into
        ``out`` (C, P); counts each chain's gradient evaluations. ``per_example``: also return
        each chain's per-example gradients (a list; None otherwise)."""
        if self._fused is not None and not per_example:
            self._fused(thetas, out)
            for e in self.estimators:
                e.n_grad_evals += e.n_samples
            return None
        if self._fused_minibatch is not None:
            idx = self._idx
            for c, (e, rng) in enumerate(zip(self.estimators, rngs)):
                idx[c] = e._next_rows(rng)[0]
                e.n_grad_evals += e._evals_per_row * e.batch_size
            return self._fused_minibatch(thetas, idx, out, per_example)
        operators = []
        for c, e in enumerate(self.estimators):
            out[c], g = e.gradient(thetas[c], rngs[c])
            operators.append(g)
        return operators if per_example else None


def _fused_control_variates(estimators):
    """:func:`~skbayes_sg.models._fused_minibatch.fused_minibatch` for a group of chains whose
    estimators are all :class:`ControlVariateGradient` on one model, with replacement, one batch
    size, centre and row distribution; None otherwise (each chain then computes its own force)."""
    e0 = estimators[0]
    same = all(
        type(e) is ControlVariateGradient
        and e.model is e0.model
        and not e.full
        and e.scheme == "replacement"
        and e.batch_size == e0.batch_size
        and e._row_scale is e0._row_scale
        and np.array_equal(e.theta_hat, e0.theta_hat)
        for e in estimators
    )
    if not same:
        return None
    g_hat = np.stack([e.g_hat for e in estimators])
    return fused_minibatch(e0.model, e0.theta_hat, g_hat, e0.batch_size, e0._row_scale)
