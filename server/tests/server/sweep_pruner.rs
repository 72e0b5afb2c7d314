//! Our ASHA and Hyperband against Optuna's own pruners (from PyPI, in the
//! virtualenv `scripts/test.sh` makes): the same curves, reported in the
//! same order, must stop the same trials at the same steps.

use gpuplane_api::metric::Goal;
use gpuplane_api::sweep::EarlyStop;
use gpuplane_server::sweeps::pruner::{Sweep, TrialRungs, judge};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};

struct Case {
    goal: Goal,
    stop: EarlyStop,
    /// Each trial's curve runs for this many steps (drawn per trial).
    lengths: std::ops::RangeInclusive<u64>,
    seed: u64,
}

const TRIALS: u64 = 80;
const AT_ONCE: usize = 8;

/// One trial's learning curve: a decay towards its own floor, with noise,
/// and now and then a NaN step (never the last).
struct Curve {
    length: u64,
    floor: f64,
    amplitude: f64,
    tau: f64,
    nan_at: Option<u64>,
    noise: Vec<f64>,
}

impl Curve {
    fn new(rng: &mut StdRng, lengths: &std::ops::RangeInclusive<u64>) -> Curve {
        let length = rng.random_range(lengths.clone());
        Curve {
            length,
            floor: rng.random_range(0.0..1.0),
            amplitude: rng.random_range(0.5..2.0),
            tau: rng.random_range(3.0..(length as f64 / 2.0).max(4.0)),
            nan_at: rng.random_bool(0.05).then(|| rng.random_range(1..length)),
            noise: (0..=length).map(|_| rng.random_range(-0.02..0.02)).collect(),
        }
    }

    fn at(&self, step: u64) -> f64 {
        if self.nan_at == Some(step) {
            return f64::NAN;
        }
        self.floor + self.amplitude * (-(step as f64) / self.tau).exp() + self.noise[step as usize]
    }
}

/// Runs the sweep with our pruner, AT_ONCE trials at a time, a random
/// running trial reporting its next step each turn; returns the events
/// (for Optuna to replay) and the (trial, step) each stop happened at.
fn simulate(key: &str, case: &Case) -> (Vec<Value>, Vec<(u64, u64)>) {
    let mut rng = StdRng::seed_from_u64(case.seed);
    let curves: Vec<Curve> = (0..TRIALS).map(|_| Curve::new(&mut rng, &case.lengths)).collect();
    let mut trials: Vec<TrialRungs> = Vec::new();
    let (mut events, mut pruned) = (Vec::new(), Vec::new());
    let (mut running, mut next): (Vec<(u64, u64)>, u64) = (Vec::new(), 0);
    let (mut auto_min_step, mut longest_finished) = (None, None);
    loop {
        while running.len() < AT_ONCE && next < TRIALS {
            events.push(json!({"trial": next, "start": true}));
            trials.push(TrialRungs {
                number: next,
                rungs: Vec::new(),
            });
            running.push((next, 1));
            next += 1;
        }
        if running.is_empty() {
            break;
        }
        let i = rng.random_range(0..running.len());
        let (number, step) = running[i];
        let curve = &curves[number as usize];
        let value = curve.at(step);
        events.push(json!({"trial": number, "step": step, "value": value.is_finite().then_some(value)}));
        let mut trial = trials[number as usize].clone();
        let sweep = Sweep {
            key,
            goal: case.goal,
            trials: &trials,
            auto_min_step,
            longest_finished,
        };
        let verdict = judge(&case.stop, &sweep, &mut trial, step, value);
        auto_min_step = auto_min_step.or(verdict.fixed_min_step);
        trials[number as usize] = trial;
        if verdict.prune {
            pruned.push((number, step));
            running.swap_remove(i);
        } else if step == curve.length {
            events.push(json!({"trial": number, "finish": value}));
            longest_finished = longest_finished.max(Some(step));
            running.swap_remove(i);
        } else {
            running[i].1 += 1;
        }
    }
    (events, pruned)
}

/// What Optuna's pruner stops when the same events are replayed through it.
fn optuna_decisions(key: &str, case: &Case, events: &[Value]) -> (String, Vec<(u64, u64)>) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: scripts/test.sh installs it, with Optuna",
        python.display()
    );
    let goal = match case.goal {
        Goal::Min => "min",
        Goal::Max => "max",
    };
    let input = json!({"key": key, "goal": goal, "stop": case.stop, "events": events});
    let mut child = Command::new(python)
        .arg(root.join("testkit/sweeps/optuna_decisions.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "optuna_decisions.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    let pruned = answer["pruned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|pair| (pair[0].as_u64().unwrap(), pair[1].as_u64().unwrap()))
        .collect();
    (answer["optuna"].as_str().unwrap_or("?").to_string(), pruned)
}

#[test]
fn asha_and_hyperband_stop_the_trials_optuna_stops_at_the_same_steps() {
    let asha = |min_step, eta, rate, bootstrap| EarlyStop::Asha {
        min_step,
        reduction_factor: eta,
        min_early_stopping_rate: rate,
        bootstrap_count: bootstrap,
    };
    let hyperband = |min_step, max_step, eta, bootstrap| EarlyStop::Hyperband {
        min_step,
        max_step,
        reduction_factor: eta,
        bootstrap_count: bootstrap,
    };
    let cases = [
        (Goal::Min, asha(Some(1), 3, 0, 0), 15..=45),
        (Goal::Max, asha(Some(2), 4, 1, 2), 15..=45),
        // Optuna's `auto`: a hundredth of the longest finished trial.
        (Goal::Min, asha(None, 3, 0, 0), 150..=450),
        (Goal::Min, hyperband(1, 45, 3, 0), 15..=45),
        (Goal::Max, hyperband(2, 60, 2, 1), 20..=60),
    ];
    let mut stopped = 0;
    for (i, (goal, stop, lengths)) in cases.into_iter().enumerate() {
        let case = Case {
            goal,
            stop,
            lengths,
            seed: 40 + i as u64,
        };
        let key = format!("swp_case{i}");
        let (events, ours) = simulate(&key, &case);
        let (version, theirs) = optuna_decisions(&key, &case, &events);
        let first_difference = ours.iter().zip(&theirs).position(|(a, b)| a != b);
        assert_eq!(
            ours,
            theirs,
            "case {i} ({stop:?}, {goal:?}): ours stopped {} trials, Optuna {version} {}; first difference at {first_difference:?}",
            ours.len(),
            theirs.len()
        );
        // Each case must stop many trials and let some finish, or it proves little.
        let finished = events.iter().filter(|e| e.get("finish").is_some()).count();
        assert!(
            ours.len() >= 10 && finished >= 1,
            "case {i} stopped {} of {TRIALS}, {finished} finished",
            ours.len()
        );
        eprintln!("case {i}: {} stopped, {finished} finished", ours.len());
        stopped += ours.len();
    }
    eprintln!("{stopped} trials stopped, each at the step Optuna's pruners stop it");
}
