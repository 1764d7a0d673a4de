"""Noisy gradients of a model's log posterior from minibatches: what a sampler sees.

A sampler never touches the data. It calls ``target.gradient(theta, rng)`` and gets the
noisy force ``F~(theta) = grad log pi~(theta)`` (the negative of the paper's
``grad U~``) with the minibatch's per-example gradients; ``target.noise_scale`` turns
their empirical covariance ``V`` into the force's noise covariance ``Sigma``.
"""

import numpy as np

#: Minibatch schemes accepted by :class:`MinibatchGradient`.
BATCH_SCHEMES = ("replacement", "epochs")


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

    def __init__(self, model, batch_size=None, scheme="replacement"):
        if scheme not in BATCH_SCHEMES:
            raise ValueError(f"batch scheme must be one of {BATCH_SCHEMES}; got {scheme!r}.")
        self.model = model
        self.n_samples = N = model.n_samples
        self.n_params = model.n_params
        self.full = batch_size is None or batch_size >= N
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

    def _next_rows(self, rng):
        """Rows of the next minibatch and the factor that turns their gradient sum into N x mean."""
        if self.full:
            return slice(None), 1.0
        if not self._queue:
            if self.scheme == "replacement":
                self._queue = list(rng.integers(0, self.n_samples, size=(self._block, self.batch_size)))
            else:
                self._queue = list(rng.permutation(self._n_blocks))
            self._queue.reverse()
        item = self._queue.pop()
        if self.scheme == "replacement":
            return item, self.n_samples / self.batch_size
        return slice(self._bounds[item], self._bounds[item + 1]), float(self._n_blocks)

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
        grads = self.model.per_example_gradients(theta, rows)
        self.n_grad_evals += grads.n_batch
        force = grads.mean() * (scale * grads.n_batch)
        force += self.model.grad_log_prior(theta)
        return force, grads

    def log_posterior_and_grad(self, theta):
        """Full-data log posterior and gradient (counts N gradient evaluations)."""
        self.n_grad_evals += self.n_samples
        return self.model.log_posterior_and_grad(theta)
