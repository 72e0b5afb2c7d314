//! Early stopping, decided as Optuna decides it, so that the same curves
//! stop the same trials.
//!
//! ASHA (Optuna's `SuccessiveHalvingPruner`): rung r is reached at step
//! `min_step · η^(rate + r)`. The first time a trial reports a step at or
//! past its next rung, the value at that step is recorded as its value for
//! the rung, and it competes with every other trial that recorded one
//! there, in any state: it goes on while it is among the best
//! `⌊n / η⌋` of those n values (the best one when n < η), and is stopped
//! otherwise, as it is when n is at most `bootstrap_count` or the value is
//! NaN. Without `min_step`, the first rung is a hundredth of the longest
//! finished trial's last step (at least 1), fixed once a trial has finished;
//! until then nothing is stopped.
//!
//! Hyperband (Optuna's `HyperbandPruner`): `⌊log_η(max / min)⌋ + 1`
//! brackets, each an ASHA whose rate is its index, and whose trials compete
//! only with each other. A trial's bracket comes from the CRC-32 of
//! `"{sweep}_{trial number}"`, spread over the brackets in proportion to
//! `⌈brackets · η^s / (s + 1)⌉` (s = brackets − 1 − index), Optuna's
//! allocation.

use gpuplane_api::metric::Goal;
use gpuplane_api::sweep::EarlyStop;

/// One trial as the pruner sees it: its number and the values it recorded
/// at each rung it reached, in rung order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TrialRungs {
    pub number: u64,
    pub rungs: Vec<f64>,
}

/// What a sweep knows besides the trial being judged.
pub struct Sweep<'a> {
    /// The sweep's id: with a trial's number, it chooses its bracket.
    pub key: &'a str,
    pub goal: Goal,
    /// Every trial of the sweep (the judged one's entry is ignored).
    pub trials: &'a [TrialRungs],
    /// ASHA's automatic first rung once fixed (kept by the sweep).
    pub auto_min_step: Option<u64>,
    /// The longest last step of the finished trials, if any finished.
    pub longest_finished: Option<u64>,
}

/// What judging one reported value decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub prune: bool,
    /// ASHA's automatic first rung, if it was fixed by this judgement.
    pub fixed_min_step: Option<u64>,
}

/// The rungs one trial climbs: where they are and whom it meets there.
struct Ladder {
    min_step: u64,
    eta: u32,
    /// ASHA's `min_early_stopping_rate`, or the trial's Hyperband bracket.
    rate: u32,
    bootstrap: u32,
    /// Hyperband's brackets: a trial competes only within its own.
    brackets: Option<Brackets>,
}

/// Trial `number`'s ladder, and ASHA's automatic first rung when this
/// fixes it; no ladder while nothing can be judged (an automatic first
/// rung before any trial finished).
fn ladder(stop: &EarlyStop, sweep: &Sweep<'_>, number: u64) -> (Option<Ladder>, Option<u64>) {
    match *stop {
        EarlyStop::Asha {
            min_step,
            reduction_factor,
            min_early_stopping_rate,
            bootstrap_count,
        } => {
            let (min_step, fixed) = match min_step.or(sweep.auto_min_step) {
                Some(min_step) => (min_step, None),
                None => match sweep.longest_finished {
                    Some(longest) => {
                        let fixed = (longest / 100).max(1);
                        (fixed, Some(fixed))
                    }
                    None => return (None, None),
                },
            };
            let ladder = Ladder {
                min_step,
                eta: reduction_factor,
                rate: min_early_stopping_rate,
                bootstrap: bootstrap_count,
                brackets: None,
            };
            (Some(ladder), fixed)
        }
        EarlyStop::Hyperband {
            min_step,
            max_step,
            reduction_factor,
            bootstrap_count,
        } => {
            let brackets = Brackets::new(min_step, max_step, reduction_factor);
            let ladder = Ladder {
                min_step,
                eta: reduction_factor,
                rate: brackets.of(sweep.key, number),
                bootstrap: bootstrap_count,
                brackets: Some(brackets),
            };
            (Some(ladder), None)
        }
    }
}

/// Where a report of `trial` can next change anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextRung {
    /// The step of its next rung: a report before it is judged "go on"
    /// without being looked at. None while no report can be judged.
    pub step: Option<u64>,
    /// ASHA's automatic first rung, if it was fixed by asking.
    pub fixed_min_step: Option<u64>,
}

/// Where `trial`'s next rung is, so that only the reports from there on
/// need reading: judging those alone decides as judging every one would.
pub fn next_rung(stop: &EarlyStop, sweep: &Sweep<'_>, trial: &TrialRungs) -> NextRung {
    let (ladder, fixed_min_step) = ladder(stop, sweep, trial.number);
    NextRung {
        step: ladder.and_then(|l| rung_step(l.min_step, l.eta, l.rate, trial.rungs.len())),
        fixed_min_step,
    }
}

/// Judges `trial`'s latest report, `value` at `step` (its highest step so
/// far), recording the rungs it reaches in `trial.rungs`.
pub fn judge(stop: &EarlyStop, sweep: &Sweep<'_>, trial: &mut TrialRungs, step: u64, value: f64) -> Verdict {
    let (ladder, fixed_min_step) = ladder(stop, sweep, trial.number);
    let mut verdict = Verdict {
        prune: false,
        fixed_min_step,
    };
    let Some(ladder) = ladder else {
        return verdict;
    };
    let competitors = |rung: usize| -> Vec<f64> {
        sweep
            .trials
            .iter()
            .filter(|other| other.number != trial.number)
            .filter(|other| {
                ladder
                    .brackets
                    .as_ref()
                    .is_none_or(|b| b.of(sweep.key, other.number) == ladder.rate)
            })
            .filter_map(|other| other.rungs.get(rung).copied())
            .collect()
    };
    loop {
        let rung = trial.rungs.len();
        let Some(rung_step) = rung_step(ladder.min_step, ladder.eta, ladder.rate, rung) else {
            return verdict;
        };
        if step < rung_step {
            return verdict;
        }
        if value.is_nan() {
            verdict.prune = true;
            return verdict;
        }
        trial.rungs.push(value);
        let mut competing = competitors(rung);
        competing.push(value);
        if competing.len() <= ladder.bootstrap as usize
            || !promotable(value, competing, ladder.eta, sweep.goal)
        {
            verdict.prune = true;
            return verdict;
        }
    }
}

/// The step of rung `rung`: `min_step · η^(rate + rung)`; None past u64.
fn rung_step(min_step: u64, eta: u32, rate: u32, rung: usize) -> Option<u64> {
    let exponent = u32::try_from(rung).ok()?.checked_add(rate)?;
    u64::from(eta).checked_pow(exponent)?.checked_mul(min_step)
}

/// Whether `value` is among the best `⌊n / η⌋` of `competing` (the best
/// when n < η).
fn promotable(value: f64, mut competing: Vec<f64>, eta: u32, goal: Goal) -> bool {
    let index = (competing.len() / eta as usize).saturating_sub(1);
    competing.sort_by(f64::total_cmp);
    match goal {
        Goal::Max => value >= competing[competing.len() - 1 - index],
        Goal::Min => value <= competing[index],
    }
}

/// Hyperband's brackets and how many trials of each budget go to each.
struct Brackets {
    budgets: Vec<u64>,
    total: u64,
}

impl Brackets {
    fn new(min_step: u64, max_step: u64, eta: u32) -> Brackets {
        // Optuna: floor(log(max / min, η)) + 1, in floating point.
        let count = ((max_step as f64 / min_step as f64).ln() / f64::from(eta).ln()).floor() as i64 + 1;
        let count = count.clamp(1, 64) as u32;
        let budgets: Vec<u64> = (0..count)
            .map(|bracket| {
                let s = count - 1 - bracket;
                let trials = f64::from(count) * f64::from(eta).powi(s as i32) / f64::from(s + 1);
                trials.ceil() as u64
            })
            .collect();
        let total = budgets.iter().sum();
        Brackets { budgets, total }
    }

    /// The bracket of trial `number` of sweep `key`.
    fn of(&self, key: &str, number: u64) -> u32 {
        let hash = crc32fast::hash(format!("{key}_{number}").as_bytes());
        let mut n = i128::from(hash) % i128::from(self.total.max(1));
        for (bracket, budget) in self.budgets.iter().enumerate() {
            n -= i128::from(*budget);
            if n < 0 {
                return bracket as u32;
            }
        }
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asha(min_step: u64, eta: u32) -> EarlyStop {
        EarlyStop::Asha {
            min_step: Some(min_step),
            reduction_factor: eta,
            min_early_stopping_rate: 0,
            bootstrap_count: 0,
        }
    }

    #[test]
    fn a_rung_keeps_the_best_third_and_records_the_value_at_the_first_step_past_it() {
        let stop = asha(2, 3);
        let mut others: Vec<TrialRungs> = (0..5)
            .map(|n| TrialRungs {
                number: n,
                rungs: vec![n as f64],
            })
            .collect();
        let mut judge_new = |value: f64, step: u64| {
            let mut trial = TrialRungs {
                number: 100 + others.len() as u64,
                rungs: Vec::new(),
            };
            let sweep = Sweep {
                key: "swp_x",
                goal: Goal::Min,
                trials: &others,
                auto_min_step: None,
                longest_finished: None,
            };
            let verdict = judge(&stop, &sweep, &mut trial, step, value);
            others.push(trial.clone());
            (verdict.prune, trial.rungs)
        };
        // Before the rung: nothing recorded, nothing decided.
        assert_eq!(judge_new(9.0, 1), (false, vec![]));
        // Six values at rung 0 (0..5 and 0.5): the best 6/3 = 2 go on.
        assert_eq!(judge_new(0.5, 2), (false, vec![0.5]));
        assert_eq!(judge_new(1.5, 3), (true, vec![1.5]));
        // Past two rungs at once: recorded at both, promoted from both.
        assert_eq!(judge_new(-1.0, 6), (false, vec![-1.0, -1.0]));
        // NaN stops at a rung, and records nothing.
        assert_eq!(judge_new(f64::NAN, 2), (true, vec![]));
    }

    #[test]
    fn without_a_min_step_nothing_stops_until_a_trial_finished() {
        let stop = EarlyStop::Asha {
            min_step: None,
            reduction_factor: 3,
            min_early_stopping_rate: 0,
            bootstrap_count: 0,
        };
        let mut trial = TrialRungs::default();
        let mut sweep = Sweep {
            key: "swp_x",
            goal: Goal::Max,
            trials: &[],
            auto_min_step: None,
            longest_finished: None,
        };
        let verdict = judge(&stop, &sweep, &mut trial, 500, 1.0);
        assert_eq!((verdict.prune, verdict.fixed_min_step), (false, None));
        sweep.longest_finished = Some(1_234);
        let verdict = judge(&stop, &sweep, &mut trial, 500, 1.0);
        assert_eq!(verdict.fixed_min_step, Some(12));
        // Rungs at 12, 36, 108 and 324 are behind step 500.
        assert_eq!(trial.rungs, vec![1.0; 4]);
    }

    #[test]
    fn judging_only_the_reports_from_the_next_rung_on_decides_as_judging_every_one() {
        use rand::{Rng, SeedableRng};
        let stops = [
            asha(3, 3),
            EarlyStop::Asha {
                min_step: None,
                reduction_factor: 2,
                min_early_stopping_rate: 1,
                bootstrap_count: 2,
            },
            EarlyStop::Hyperband {
                min_step: 2,
                max_step: 60,
                reduction_factor: 3,
                bootstrap_count: 0,
            },
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for stop in &stops {
            for _ in 0..200 {
                let others: Vec<TrialRungs> = (0..rng.random_range(0..12))
                    .map(|n| TrialRungs {
                        number: n,
                        rungs: (0..rng.random_range(0..5)).map(|_| rng.random::<f64>()).collect(),
                    })
                    .collect();
                let sweep = Sweep {
                    key: "swp_same",
                    goal: if rng.random() { Goal::Min } else { Goal::Max },
                    trials: &others,
                    auto_min_step: None,
                    longest_finished: rng.random_bool(0.7).then(|| rng.random_range(1..2_000)),
                };
                let reports: Vec<(u64, f64)> = (1..rng.random_range(2..150))
                    .map(|step| {
                        (
                            step,
                            if rng.random_bool(0.02) {
                                f64::NAN
                            } else {
                                rng.random()
                            },
                        )
                    })
                    .collect();
                let number = 100;
                // Every report judged, in order.
                let mut every = TrialRungs {
                    number,
                    rungs: vec![],
                };
                let stopped_every = reports
                    .iter()
                    .find(|(step, value)| judge(stop, &sweep, &mut every, *step, *value).prune)
                    .map(|(step, _)| *step);
                // In looks of a few reports each, only those from the next rung on.
                let mut skipping = TrialRungs {
                    number,
                    rungs: vec![],
                };
                let mut stopped_skipping = None;
                for look in reports.chunks(rng.random_range(1..20)) {
                    let next = next_rung(stop, &sweep, &skipping).step;
                    if let Some((step, _)) = look
                        .iter()
                        .filter(|(step, _)| next.is_some_and(|n| *step >= n))
                        .find(|(step, value)| judge(stop, &sweep, &mut skipping, *step, *value).prune)
                    {
                        stopped_skipping = Some(*step);
                        break;
                    }
                }
                assert_eq!(
                    (stopped_skipping, &skipping.rungs),
                    (stopped_every, &every.rungs),
                    "{stop:?}"
                );
            }
        }
    }

    #[test]
    fn hyperband_spreads_trials_over_brackets_as_optuna_allocates_them() {
        // min 1, max 27, η 3: 4 brackets with budgets 27, 12, 6, 4 (Optuna's).
        let brackets = Brackets::new(1, 27, 3);
        assert_eq!(brackets.budgets, vec![27, 12, 6, 4]);
        let mut seen = [0u32; 4];
        for number in 0..490 {
            seen[brackets.of("study", number) as usize] += 1;
        }
        // Roughly in proportion: 27/49 of trials in the first.
        assert!(seen[0] > seen[1] && seen[1] > seen[3], "{seen:?}");
        // Python: binascii.crc32(b"study_0") % 49 = 38, past bracket 0's 27.
        assert_eq!(crc32fast::hash(b"study_0") % 49, 38);
        assert_eq!(brackets.of("study", 0), 1);
    }
}
