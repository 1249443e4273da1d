"""posteriordb's Stan models, translated by hand into sluice models (used by ``posteriordb.py``).

One function per posterior, ``build(data) -> sluice.Model``, where ``data`` is
the posterior's data set (the JSON dict of ``data/data/<name>.json.zip``).
Each log density is over UNCONSTRAINED parameters, as Stan samples them:

* ``real<lower=0> s``: ``s = exp(u)``, log-Jacobian ``u``;
* ``real<lower=0, upper=b> x``: ``x = b * inv_logit(u)``, log-Jacobian
  ``log(b) + log_sigmoid(u) + log_sigmoid(-u)`` (``b`` may be another
  parameter, as ``beta1``'s ``1 - alpha1`` in ``garch11``);
* ``ordered[2] mu``: ``mu = (u1, u1 + exp(u2))``, log-Jacobian ``u2``.

Priors are Stan's: a parameter without a sampling statement keeps its flat
(improper) prior, a bounded one the flat prior on its support. Constants
Stan drops with ``~`` are kept here (``jax.scipy.stats`` log densities), which
changes nothing. Chains start as Stan's do: every unconstrained scalar drawn
uniformly on (-2, 2), per chain.

Each model's ``transform`` names its outputs as Stan does, so that
``draws["beta"][..., 0]`` is the reference's ``beta[1]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import stats

import sluice

jax.config.update("jax_enable_x64", True)  # posteriordb's models are float64 in Stan

__all__ = ["MODELS", "build"]

Data = dict[str, Any]


def _array(value: Any) -> jax.Array:
    return jnp.asarray(np.asarray(value, dtype=np.float64))


def _model(
    log_density: Callable, shapes: dict[str, tuple[int, ...]], transform: Callable, name: str
) -> sluice.Model:
    """A model whose chains start uniformly on (-2, 2) in unconstrained space (as Stan's)."""
    names = sorted(shapes)

    def init(rng_key: jax.Array) -> dict[str, jax.Array]:
        keys = jax.random.split(rng_key, len(names))
        return {
            n: jax.random.uniform(k, shapes[n], jnp.float64, -2.0, 2.0)
            for n, k in zip(names, keys, strict=True)
        }

    return sluice.Model(log_density, init=init, transform=transform, name=name, calling="pytree")


def _positive(u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``<lower=0>``: the value and the log-Jacobian."""
    return jnp.exp(u), jnp.sum(u)


def _unit(u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``<lower=0, upper=1>``: the value and the log-Jacobian."""
    return jax.nn.sigmoid(u), jnp.sum(jax.nn.log_sigmoid(u) + jax.nn.log_sigmoid(-u))


def _normal_regression(y: jax.Array, columns: jax.Array, n_beta: int, name: str) -> sluice.Model:
    """``y ~ normal(columns @ beta, sigma)``, flat priors on ``beta`` and ``sigma > 0``."""

    def log_density(p):
        sigma, jac = _positive(p["log_sigma"])
        return jnp.sum(stats.norm.logpdf(y, columns @ p["beta"], sigma)) + jac

    def transform(p):
        return {"beta": p["beta"], "sigma": jnp.exp(p["log_sigma"])}

    return _model(log_density, {"beta": (n_beta,), "log_sigma": ()}, transform, name)


# -- regressions ------------------------------------------------------------------------------
def diamonds(data: Data) -> sluice.Model:
    """brms: centred design, ``b ~ normal(0, 1)``, ``Intercept ~ student_t(3, 8, 10)``,
    ``sigma ~ student_t(3, 0, 10)`` on (0, inf), ``Y ~ normal(Intercept + Xc b, sigma)``."""
    x = _array(data["X"])
    y = _array(data["Y"])
    xc = x[:, 1:] - jnp.mean(x[:, 1:], axis=0)
    kc = int(data["K"]) - 1
    prior_only = bool(data["prior_only"])

    def log_density(p):
        sigma, jac = _positive(p["log_sigma"])
        lp = jnp.sum(stats.norm.logpdf(p["b"], 0.0, 1.0))
        lp += stats.t.logpdf(p["Intercept"], 3.0, 8.0, 10.0)
        lp += stats.t.logpdf(sigma, 3.0, 0.0, 10.0)
        if not prior_only:
            lp += jnp.sum(stats.norm.logpdf(y, p["Intercept"] + xc @ p["b"], sigma))
        return lp + jac

    def transform(p):
        return {"b": p["b"], "Intercept": p["Intercept"], "sigma": jnp.exp(p["log_sigma"])}

    shapes = {"b": (kc,), "Intercept": (), "log_sigma": ()}
    return _model(log_density, shapes, transform, "diamonds")


def kidscore_interaction(data: Data) -> sluice.Model:
    """``kid_score ~ normal(b1 + b2 mom_hs + b3 mom_iq + b4 mom_hs*mom_iq, sigma)``,
    ``sigma ~ cauchy(0, 2.5)`` on (0, inf), flat ``beta``."""
    y, hs, iq = _array(data["kid_score"]), _array(data["mom_hs"]), _array(data["mom_iq"])
    columns = jnp.stack([jnp.ones_like(hs), hs, iq, hs * iq], axis=1)

    def log_density(p):
        sigma, jac = _positive(p["log_sigma"])
        lp = stats.cauchy.logpdf(sigma, 0.0, 2.5)
        return lp + jnp.sum(stats.norm.logpdf(y, columns @ p["beta"], sigma)) + jac

    def transform(p):
        return {"beta": p["beta"], "sigma": jnp.exp(p["log_sigma"])}

    return _model(log_density, {"beta": (4,), "log_sigma": ()}, transform, "kidscore_interaction")


def logearn_interaction(data: Data) -> sluice.Model:
    """``log(earn) ~ normal(b1 + b2 height + b3 male + b4 height*male, sigma)``, flat priors."""
    height, male = _array(data["height"]), _array(data["male"])
    columns = jnp.stack([jnp.ones_like(height), height, male, height * male], axis=1)
    return _normal_regression(jnp.log(_array(data["earn"])), columns, 4, "logearn_interaction")


def logmesquite_logvash(data: Data) -> sluice.Model:
    """``log(weight) ~ normal(b1 + b2 log(volume) + b3 log(area) + b4 log(shape)
    + b5 log(total_height) + b6 group, sigma)``, flat priors."""
    d1, d2 = _array(data["diam1"]), _array(data["diam2"])
    canopy, total, group = (_array(data[k]) for k in ("canopy_height", "total_height", "group"))
    columns = jnp.stack(
        [jnp.ones_like(d1), jnp.log(d1 * d2 * canopy), jnp.log(d1 * d2), jnp.log(d1 / d2),
         jnp.log(total), group],
        axis=1,
    )  # fmt: skip
    return _normal_regression(jnp.log(_array(data["weight"])), columns, 6, "logmesquite_logvash")


def nes(data: Data) -> sluice.Model:
    """``partyid7 ~ normal(b1 + b2 real_ideo + b3 race_adj + b4..b6 age dummies + b7 educ1
    + b8 gender + b9 income, sigma)``, flat priors."""
    age = np.asarray(data["age_discrete"])
    columns = jnp.stack(
        [jnp.ones(len(age)), _array(data["real_ideo"]), _array(data["race_adj"]),
         _array(age == 2), _array(age == 3), _array(age == 4), _array(data["educ1"]),
         _array(data["gender"]), _array(data["income"])],
        axis=1,
    )  # fmt: skip
    return _normal_regression(_array(data["partyid7"]), columns, 9, "nes")


def kilpisjarvi(data: Data) -> sluice.Model:
    """``y ~ normal(alpha + beta x, sigma)`` with ``x`` the years (so ``alpha`` and ``beta``
    are almost collinear), ``alpha ~ normal(pmualpha, psalpha)``, ``beta ~ normal(pmubeta,
    psbeta)``, flat ``sigma``."""
    x, y = _array(data["x"]), _array(data["y"])
    prior = [float(data[k]) for k in ("pmualpha", "psalpha", "pmubeta", "psbeta")]

    def log_density(p):
        sigma, jac = _positive(p["log_sigma"])
        lp = stats.norm.logpdf(p["alpha"], prior[0], prior[1])
        lp += stats.norm.logpdf(p["beta"], prior[2], prior[3])
        return lp + jnp.sum(stats.norm.logpdf(y, p["alpha"] + p["beta"] * x, sigma)) + jac

    def transform(p):
        return {"alpha": p["alpha"], "beta": p["beta"], "sigma": jnp.exp(p["log_sigma"])}

    shapes = {"alpha": (), "beta": (), "log_sigma": ()}
    return _model(log_density, shapes, transform, "kilpisjarvi")


def blr(data: Data) -> sluice.Model:
    """``beta ~ normal(0, 10)``, ``sigma ~ normal(0, 10)`` on (0, inf),
    ``y ~ normal(X beta, sigma)``."""
    x, y = _array(data["X"]), _array(data["y"])

    def log_density(p):
        sigma, jac = _positive(p["log_sigma"])
        lp = jnp.sum(stats.norm.logpdf(p["beta"], 0.0, 10.0)) + stats.norm.logpdf(sigma, 0.0, 10.0)
        return lp + jnp.sum(stats.norm.logpdf(y, x @ p["beta"], sigma)) + jac

    def transform(p):
        return {"beta": p["beta"], "sigma": jnp.exp(p["log_sigma"])}

    return _model(log_density, {"beta": (int(data["D"]),), "log_sigma": ()}, transform, "blr")


# -- hierarchical and Gaussian-process models -------------------------------------------------
def eight_schools_noncentered(data: Data) -> sluice.Model:
    """``theta = mu + tau theta_trans``, ``theta_trans ~ normal(0, 1)``, ``y ~ normal(theta,
    sigma)``, ``mu ~ normal(0, 5)``, ``tau ~ cauchy(0, 5)`` on (0, inf)."""
    y, s = _array(data["y"]), _array(data["sigma"])

    def log_density(p):
        tau, jac = _positive(p["log_tau"])
        theta = p["theta_trans"] * tau + p["mu"]
        lp = jnp.sum(stats.norm.logpdf(p["theta_trans"], 0.0, 1.0))
        lp += jnp.sum(stats.norm.logpdf(y, theta, s))
        lp += stats.norm.logpdf(p["mu"], 0.0, 5.0) + stats.cauchy.logpdf(tau, 0.0, 5.0)
        return lp + jac

    def transform(p):
        tau = jnp.exp(p["log_tau"])
        return {"theta": p["theta_trans"] * tau + p["mu"], "mu": p["mu"], "tau": tau}

    shapes = {"theta_trans": (int(data["J"]),), "mu": (), "log_tau": ()}
    return _model(log_density, shapes, transform, "eight_schools_noncentered")


def gp_pois_regr(data: Data) -> sluice.Model:
    """``f = cholesky(gp_exp_quad_cov(x, alpha, rho) + 1e-10 I) f_tilde``, ``rho ~ gamma(25,
    4)``, ``alpha ~ normal(0, 2)``, both on (0, inf), ``f_tilde ~ normal(0, 1)``,
    ``k ~ poisson_log(f)``."""
    x, k = _array(data["x"]), _array(data["k"])
    n = x.shape[0]
    sq = (x[:, None] - x[None, :]) ** 2

    def latent(p):
        rho, alpha = jnp.exp(p["log_rho"]), jnp.exp(p["log_alpha"])
        cov = alpha**2 * jnp.exp(-0.5 * sq / rho**2) + 1e-10 * jnp.eye(n)
        return jnp.linalg.cholesky(cov) @ p["f_tilde"], rho, alpha

    def log_density(p):
        f, rho, alpha = latent(p)
        lp = stats.gamma.logpdf(rho, 25.0, scale=1 / 4.0) + stats.norm.logpdf(alpha, 0.0, 2.0)
        lp += jnp.sum(stats.norm.logpdf(p["f_tilde"], 0.0, 1.0))
        lp += jnp.sum(k * f - jnp.exp(f) - jax.scipy.special.gammaln(k + 1))  # poisson_log
        return lp + p["log_rho"] + p["log_alpha"]

    def transform(p):
        f, rho, alpha = latent(p)
        return {"rho": rho, "alpha": alpha, "f": f}

    shapes = {"log_rho": (), "log_alpha": (), "f_tilde": (n,)}
    return _model(log_density, shapes, transform, "gp_pois_regr")


# -- time series ------------------------------------------------------------------------------
def ark(data: Data) -> sluice.Model:
    """AR(K): ``y[t] ~ normal(alpha + sum_k beta[k] y[t-k], sigma)`` for ``t > K``,
    ``alpha, beta ~ normal(0, 10)``, ``sigma ~ cauchy(0, 2.5)`` on (0, inf)."""
    y = _array(data["y"])
    big_k, big_t = int(data["K"]), int(data["T"])
    lags = jnp.stack([y[big_k - k : big_t - k] for k in range(1, big_k + 1)], axis=1)
    target = y[big_k:]

    def log_density(p):
        sigma, jac = _positive(p["log_sigma"])
        lp = stats.norm.logpdf(p["alpha"], 0.0, 10.0)
        lp += jnp.sum(stats.norm.logpdf(p["beta"], 0.0, 10.0))
        lp += stats.cauchy.logpdf(sigma, 0.0, 2.5)
        mu = p["alpha"] + lags @ p["beta"]
        return lp + jnp.sum(stats.norm.logpdf(target, mu, sigma)) + jac

    def transform(p):
        return {"alpha": p["alpha"], "beta": p["beta"], "sigma": jnp.exp(p["log_sigma"])}

    shapes = {"alpha": (), "beta": (big_k,), "log_sigma": ()}
    return _model(log_density, shapes, transform, "arK")


def garch11(data: Data) -> sluice.Model:
    """GARCH(1,1): ``sigma[1] = sigma1``, ``sigma[t]^2 = alpha0 + alpha1 (y[t-1] - mu)^2
    + beta1 sigma[t-1]^2``, ``y ~ normal(mu, sigma)``; flat priors on ``mu``, ``alpha0 > 0``,
    ``alpha1`` in (0, 1) and ``beta1`` in (0, 1 - alpha1)."""
    y = _array(data["y"])
    sigma1 = float(data["sigma1"])

    def constrain(p):
        alpha0, jac0 = _positive(p["log_alpha0"])
        alpha1, jac1 = _unit(p["logit_alpha1"])
        share, jac2 = _unit(p["logit_beta1"])
        return alpha0, alpha1, (1 - alpha1) * share, jac0 + jac1 + jac2 + jnp.log1p(-alpha1)

    def log_density(p):
        alpha0, alpha1, beta1, jac = constrain(p)
        mu = p["mu"]

        def step(var, y_prev):
            var = alpha0 + alpha1 * (y_prev - mu) ** 2 + beta1 * var
            return var, var

        _, var = jax.lax.scan(step, jnp.asarray(sigma1**2), y[:-1])
        sigma = jnp.concatenate([jnp.asarray([sigma1]), jnp.sqrt(var)])
        return jnp.sum(stats.norm.logpdf(y, mu, sigma)) + jac

    def transform(p):
        alpha0, alpha1, beta1, _ = constrain(p)
        return {"mu": p["mu"], "alpha0": alpha0, "alpha1": alpha1, "beta1": beta1}

    shapes = {"mu": (), "log_alpha0": (), "logit_alpha1": (), "logit_beta1": ()}
    return _model(log_density, shapes, transform, "garch11")


def arma11(data: Data) -> sluice.Model:
    """ARMA(1,1): ``err[1] = y[1] - (mu + phi mu)``, ``err[t] = y[t] - mu - phi y[t-1]
    - theta err[t-1]``, ``err ~ normal(0, sigma)``; ``mu ~ normal(0, 10)``, ``phi, theta ~
    normal(0, 2)``, ``sigma ~ cauchy(0, 2.5)`` on (0, inf)."""
    y = _array(data["y"])

    def log_density(p):
        mu, phi, theta = p["mu"], p["phi"], p["theta"]
        sigma, jac = _positive(p["log_sigma"])
        err1 = y[0] - (mu + phi * mu)

        def step(err_prev, pair):
            y_prev, y_t = pair
            err = y_t - (mu + phi * y_prev + theta * err_prev)
            return err, err

        _, errs = jax.lax.scan(step, err1, (y[:-1], y[1:]))
        err = jnp.concatenate([err1[None], errs])
        lp = stats.norm.logpdf(mu, 0.0, 10.0) + stats.norm.logpdf(phi, 0.0, 2.0)
        lp += stats.norm.logpdf(theta, 0.0, 2.0) + stats.cauchy.logpdf(sigma, 0.0, 2.5)
        return lp + jnp.sum(stats.norm.logpdf(err, 0.0, sigma)) + jac

    def transform(p):
        return {"mu": p["mu"], "phi": p["phi"], "theta": p["theta"],
                "sigma": jnp.exp(p["log_sigma"])}  # fmt: skip

    shapes = {"mu": (), "phi": (), "theta": (), "log_sigma": ()}
    return _model(log_density, shapes, transform, "arma11")


# -- mixtures ---------------------------------------------------------------------------------
def low_dim_gauss_mix(data: Data) -> sluice.Model:
    """``y[n] ~ theta normal(mu[1], sigma[1]) + (1 - theta) normal(mu[2], sigma[2])`` with
    ``ordered[2] mu ~ normal(0, 2)``, ``sigma ~ normal(0, 2)`` on (0, inf), ``theta ~
    beta(5, 5)``."""
    y = _array(data["y"])

    def constrain(p):
        mu = jnp.stack([p["mu_raw"][0], p["mu_raw"][0] + jnp.exp(p["mu_raw"][1])])
        sigma, jac_s = _positive(p["log_sigma"])
        theta, jac_t = _unit(p["logit_theta"])
        return mu, sigma, theta, p["mu_raw"][1] + jac_s + jac_t

    def log_density(p):
        mu, sigma, theta, jac = constrain(p)
        lp = jnp.sum(stats.norm.logpdf(sigma, 0.0, 2.0)) + jnp.sum(stats.norm.logpdf(mu, 0.0, 2.0))
        lp += stats.beta.logpdf(theta, 5.0, 5.0)
        mix = jnp.logaddexp(
            jnp.log(theta) + stats.norm.logpdf(y, mu[0], sigma[0]),
            jnp.log1p(-theta) + stats.norm.logpdf(y, mu[1], sigma[1]),
        )
        return lp + jnp.sum(mix) + jac

    def transform(p):
        mu, sigma, theta, _ = constrain(p)
        return {"mu": mu, "sigma": sigma, "theta": theta}

    shapes = {"mu_raw": (2,), "log_sigma": (2,), "logit_theta": ()}
    return _model(log_density, shapes, transform, "low_dim_gauss_mix")


# posterior name (posteriordb's posteriors/<name>.json) -> builder, in table order
MODELS: dict[str, Callable[[Data], sluice.Model]] = {
    "kilpisjarvi_mod-kilpisjarvi": kilpisjarvi,
    "diamonds-diamonds": diamonds,
    "kidiq-kidscore_interaction": kidscore_interaction,
    "earnings-logearn_interaction": logearn_interaction,
    "mesquite-logmesquite_logvash": logmesquite_logvash,
    "nes1972-nes": nes,
    "sblrc-blr": blr,
    "arK-arK": ark,
    "arma-arma11": arma11,
    "garch-garch11": garch11,
    "eight_schools-eight_schools_noncentered": eight_schools_noncentered,
    "gp_pois_regr-gp_pois_regr": gp_pois_regr,
    "low_dim_gauss_mix-low_dim_gauss_mix": low_dim_gauss_mix,
}


def build(posterior: str, data: Data) -> sluice.Model:
    """The sluice model of posteriordb's ``posterior`` on its data set ``data``."""
    if posterior not in MODELS:
        raise KeyError(f"no translation of {posterior!r}; choose from {', '.join(MODELS)}")
    return MODELS[posterior](data)
