//! Choosing a trial's parameters: the next grid combination, a random draw,
//! or a TPE proposal. A proposal depends only on the sweep's seed, the
//! trial's number and the trials observed, never on the process that made
//! it, so a restarted server proposes what the first would have.
//!
//! TPE is Optuna's univariate TPE with its defaults: 10 random trials
//! first; then each parameter on its own, the observed trials split into
//! the best γ(n) = min(⌈n/10⌉, 25) and the rest, a Parzen estimator
//! (truncated Gaussians at the observations plus a wide prior, each as
//! wide as the larger gap to its neighbours, clipped) fitted to each, and
//! of 24 draws from the good one the one where good/bad is largest. Finished
//! trials rank by their metric, stopped ones after them by the rung they
//! reached, and running ones last (Optuna's `constant_liar`), so
//! concurrent trials do not all crowd one spot. Failed trials are left out.

use gpuplane_api::metric::Goal;
use gpuplane_api::sweep::{Distribution, Method, Parameter, Params};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

/// Random trials before TPE models the space (Optuna's `n_startup_trials`).
pub const STARTUP_TRIALS: usize = 10;
/// Draws from the good estimator per parameter (Optuna's `n_ei_candidates`).
const CANDIDATES: usize = 24;

/// How an observed trial did, for TPE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Finished with this final value of the metric.
    Finished(f64),
    /// Stopped early after recording `rungs` rungs, the last with `last`.
    Pruned {
        rungs: usize,
        last: f64,
    },
    Running,
    Failed,
}

/// A trial already proposed.
#[derive(Debug, Clone)]
pub struct Observed {
    pub number: u64,
    pub params: Params,
    pub outcome: Outcome,
}

/// The parameters of trial `number`; None when a grid is exhausted.
pub fn propose(
    method: Method,
    parameters: &[Parameter],
    goal: Goal,
    seed: u64,
    number: u64,
    observed: &[Observed],
) -> Option<Params> {
    let mut rng = StdRng::seed_from_u64(seed ^ number.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    match method {
        Method::Grid => grid(parameters, number),
        Method::Random => Some(
            parameters
                .iter()
                .map(|p| (p.name.clone(), draw(&p.distribution, &mut rng)))
                .collect(),
        ),
        Method::Tpe => {
            let usable = observed.iter().filter(|o| o.outcome != Outcome::Failed).count();
            if usable < STARTUP_TRIALS {
                return propose(Method::Random, parameters, goal, seed, number, observed);
            }
            let ranked = rank(observed, goal);
            Some(
                parameters
                    .iter()
                    .map(|p| (p.name.clone(), tpe(p, &ranked, &mut rng)))
                    .collect(),
            )
        }
    }
}

/// Combination `number` of the grid, the last parameter changing fastest.
fn grid(parameters: &[Parameter], number: u64) -> Option<Params> {
    let lists: Vec<Vec<Value>> = parameters
        .iter()
        .map(|p| p.distribution.grid_values().unwrap_or_default())
        .collect();
    let mut rest = number;
    let mut params = Params::new();
    for (parameter, values) in parameters.iter().zip(&lists).rev() {
        let n = values.len() as u64;
        if n == 0 {
            return None;
        }
        params.insert(parameter.name.clone(), values[(rest % n) as usize].clone());
        rest /= n;
    }
    (rest == 0).then_some(params)
}

/// One independent draw.
fn draw(distribution: &Distribution, rng: &mut StdRng) -> Value {
    match distribution {
        Distribution::Constant { value } => value.clone(),
        Distribution::Categorical {
            values,
            probabilities,
        } => {
            let index = match probabilities {
                Some(p) => pick(p, rng.random::<f64>()),
                None => rng.random_range(0..values.len()),
            };
            values[index].clone()
        }
        Distribution::Range { low, high, .. } => {
            let x = if high > low {
                rng.random_range(*low..*high)
            } else {
                *low
            };
            distribution.value_at(x)
        }
        Distribution::Normal { mu, sigma, .. } => distribution.value_at(mu + sigma * standard_normal(rng)),
    }
}

/// The index whose cumulative weight first passes `u` (in [0, 1)).
fn pick(weights: &[f64], u: f64) -> usize {
    let total: f64 = weights.iter().sum();
    let mut left = u * total;
    for (i, w) in weights.iter().enumerate() {
        left -= w;
        if left < 0.0 {
            return i;
        }
    }
    weights.len() - 1
}

fn standard_normal(rng: &mut StdRng) -> f64 {
    // Box–Muller.
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The observed trials best first (failed ones left out), each with its
/// place in trial order (the weights favour recent ones).
fn rank<'a>(observed: &'a [Observed], goal: Goal) -> Ranked<'a> {
    let mut trials: Vec<&'a Observed> = observed.iter().filter(|o| o.outcome != Outcome::Failed).collect();
    let better = |v: f64| match goal {
        Goal::Min => v,
        Goal::Max => -v,
    };
    let key = |o: &Observed| match o.outcome {
        Outcome::Finished(v) => (0, 0i64, better(v)),
        Outcome::Pruned { rungs, last } => (1, -(rungs as i64), better(last)),
        Outcome::Running | Outcome::Failed => (2, 0, 0.0),
    };
    trials.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        (ka.0, ka.1)
            .cmp(&(kb.0, kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then(a.number.cmp(&b.number))
    });
    let n = trials.len();
    let good = n.div_ceil(10).min(25);
    let mut by_number: Vec<u64> = trials.iter().map(|t| t.number).collect();
    by_number.sort_unstable();
    let weights = recency_weights(n);
    let weight_of = |number: u64| weights[by_number.binary_search(&number).unwrap_or(0)];
    let (below, above) = trials.split_at(good);
    let weigh = |set: &[&'a Observed]| set.iter().map(|t| (&t.params, weight_of(t.number))).collect();
    Ranked {
        below: weigh(below),
        above: weigh(above),
    }
}

/// Optuna's `default_weights`: equal for up to 25 trials, else a ramp
/// from 1/n for the oldest up to 1 for the newest 25.
fn recency_weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let ramp = n - 25;
    let mut weights: Vec<f64> = (0..ramp)
        .map(|i| {
            let start = 1.0 / n as f64;
            if ramp == 1 {
                start
            } else {
                start + (1.0 - start) * i as f64 / (ramp - 1) as f64
            }
        })
        .collect();
    weights.extend(std::iter::repeat_n(1.0, 25));
    weights
}

/// The good and the other trials' parameters, each with its weight.
struct Ranked<'a> {
    below: Vec<(&'a Params, f64)>,
    above: Vec<(&'a Params, f64)>,
}

/// TPE's choice for one parameter.
fn tpe(parameter: &Parameter, ranked: &Ranked<'_>, rng: &mut StdRng) -> Value {
    let d = &parameter.distribution;
    match d {
        Distribution::Constant { value } => value.clone(),
        Distribution::Categorical { values, .. } => {
            let estimate = |set: &[(&Params, f64)]| {
                // Each observation weighs on its value; the prior spreads 1 over all.
                let mut mass = vec![1.0 / values.len() as f64; values.len()];
                for (params, weight) in set {
                    if let Some(i) = params
                        .get(&parameter.name)
                        .and_then(|v| values.iter().position(|x| x == v))
                    {
                        mass[i] += weight;
                    }
                }
                let total: f64 = mass.iter().sum();
                mass.into_iter().map(|m| m / total).collect::<Vec<f64>>()
            };
            let (good, bad) = (estimate(&ranked.below), estimate(&ranked.above));
            let best = (0..CANDIDATES)
                .map(|_| pick(&good, rng.random::<f64>()))
                .max_by(|&a, &b| (good[a].ln() - bad[a].ln()).total_cmp(&(good[b].ln() - bad[b].ln())))
                .unwrap_or(0);
            values[best].clone()
        }
        Distribution::Range { low, high, .. } => {
            let points = |set: &[(&Params, f64)]| {
                set.iter()
                    .filter_map(|(params, w)| Some((d.coordinate_of(params.get(&parameter.name)?)?, *w)))
                    .collect::<Vec<(f64, f64)>>()
            };
            let good = Parzen::fit(&points(&ranked.below), *low, *high);
            let bad = Parzen::fit(&points(&ranked.above), *low, *high);
            let best = (0..CANDIDATES)
                .map(|_| good.sample(rng))
                .max_by(|&a, &b| {
                    (good.log_pdf(a) - bad.log_pdf(a)).total_cmp(&(good.log_pdf(b) - bad.log_pdf(b)))
                })
                .unwrap_or(*low);
            d.value_at(best)
        }
        // Refused for tpe when the sweep is created.
        Distribution::Normal { .. } => draw(d, rng),
    }
}

/// A mixture of Gaussians truncated to `[low, high]`: one per observation
/// and a prior over the whole range.
struct Parzen {
    low: f64,
    high: f64,
    /// (weight, mean, deviation), weights summing to 1.
    kernels: Vec<(f64, f64, f64)>,
}

impl Parzen {
    fn fit(points: &[(f64, f64)], low: f64, high: f64) -> Parzen {
        let width = (high - low).max(f64::MIN_POSITIVE);
        let prior = (0.5 * (low + high), width);
        let mut mus: Vec<f64> = points.iter().map(|(x, _)| *x).collect();
        mus.push(prior.0);
        // Each as wide as the larger gap to its neighbours (the range's
        // ends count as neighbours), the outermost as their inner gap.
        let mut order: Vec<usize> = (0..mus.len()).collect();
        order.sort_by(|&a, &b| mus[a].total_cmp(&mus[b]));
        let sorted: Vec<f64> = std::iter::once(low)
            .chain(order.iter().map(|&i| mus[i]))
            .chain(std::iter::once(high))
            .collect();
        let mut sigmas = vec![0.0; mus.len()];
        for (k, &i) in order.iter().enumerate() {
            sigmas[i] = (sorted[k + 1] - sorted[k]).max(sorted[k + 2] - sorted[k + 1]);
        }
        if sorted.len() >= 4 {
            sigmas[order[0]] = sorted[2] - sorted[1];
            sigmas[order[order.len() - 1]] = sorted[sorted.len() - 2] - sorted[sorted.len() - 3];
        }
        // Optuna's magic clip.
        let min_sigma = width / (1.0 + mus.len() as f64).min(100.0);
        let mut kernels: Vec<(f64, f64, f64)> = points
            .iter()
            .zip(&sigmas)
            .map(|((x, w), s)| (*w, *x, s.clamp(min_sigma, width)))
            .collect();
        kernels.push((1.0, prior.0, prior.1));
        let total: f64 = kernels.iter().map(|k| k.0).sum();
        for kernel in &mut kernels {
            kernel.0 /= total;
        }
        Parzen { low, high, kernels }
    }

    fn sample(&self, rng: &mut StdRng) -> f64 {
        let weights: Vec<f64> = self.kernels.iter().map(|k| k.0).collect();
        let (_, mu, sigma) = self.kernels[pick(&weights, rng.random::<f64>())];
        for _ in 0..100 {
            let x = mu + sigma * standard_normal(rng);
            if (self.low..=self.high).contains(&x) {
                return x;
            }
        }
        mu.clamp(self.low, self.high)
    }

    fn log_pdf(&self, x: f64) -> f64 {
        let density: f64 = self
            .kernels
            .iter()
            .map(|&(w, mu, sigma)| {
                let mass = phi((self.high - mu) / sigma) - phi((self.low - mu) / sigma);
                let z = (x - mu) / sigma;
                w * (-0.5 * z * z).exp() / (sigma * (std::f64::consts::TAU).sqrt() * mass.max(1e-12))
            })
            .sum();
        density.max(1e-300).ln()
    }
}

/// The standard normal's cumulative distribution.
fn phi(z: f64) -> f64 {
    0.5 * (1.0 + libm::erf(z / std::f64::consts::SQRT_2))
}

#[cfg(test)]
mod tests;
