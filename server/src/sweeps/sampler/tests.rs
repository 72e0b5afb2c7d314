use super::*;
use gpuplane_api::sweep::SweepSpec;
use serde_json::json;

fn parameters(file: Value) -> Vec<Parameter> {
    let spec: SweepSpec = serde_json::from_value(json!({
        "method": "random",
        "parameters": file,
        "max_trials": 1,
        "job": {"command": ["x"]},
    }))
    .unwrap();
    spec.check(0).unwrap().parameters
}

#[test]
fn a_grid_proposes_each_combination_once_then_nothing() {
    let space = parameters(json!({"a": {"values": [1, 2, 3]}, "b": {"values": ["x", "y"]}}));
    let proposals: Vec<Params> = (0..)
        .map_while(|n| propose(Method::Grid, &space, Goal::Min, 0, n, &[]))
        .collect();
    assert_eq!(proposals.len(), 6);
    let mut seen: Vec<String> = proposals
        .iter()
        .map(|p| format!("{}{}", p["a"], p["b"]))
        .collect();
    assert_eq!(seen[..2], ["1\"x\"".to_string(), "1\"y\"".to_string()]);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 6);
}

#[test]
fn random_draws_are_the_seeds_and_the_trials_own() {
    let space = parameters(json!({
        "lr": {"distribution": "log_uniform_values", "min": 0.0001, "max": 0.1},
        "layers": {"min": 1, "max": 4},
        "opt": {"values": ["adam", "sgd"], "probabilities": [0.9, 0.1]},
    }));
    let draw = |seed, n| propose(Method::Random, &space, Goal::Min, seed, n, &[]).unwrap();
    assert_eq!(draw(1, 5), draw(1, 5));
    assert_ne!(draw(1, 5), draw(1, 6));
    assert_ne!(draw(1, 5), draw(2, 5));
    let draws: Vec<Params> = (0..2_000).map(|n| draw(3, n)).collect();
    for p in &draws {
        let lr = p["lr"].as_f64().unwrap();
        assert!((0.0001..=0.1).contains(&lr), "{lr}");
        assert!((1..=4).contains(&p["layers"].as_i64().unwrap()));
    }
    // Log-uniform: each decade about as likely.
    let small = draws.iter().filter(|p| p["lr"].as_f64().unwrap() < 0.001).count();
    assert!((500..830).contains(&small), "{small} of 2000 below 1e-3");
    let adam = draws.iter().filter(|p| p["opt"] == json!("adam")).count();
    assert!((1_700..1_900).contains(&adam), "{adam} of 2000 adam");
    let fours = draws.iter().filter(|p| p["layers"] == json!(4)).count();
    assert!((400..600).contains(&fours), "{fours} of 2000 with 4 layers");
}

/// A function with a known minimum of 0 at x = 0.3, y = 0.7, optimiser sgd.
fn known(params: &Params) -> f64 {
    let x = params["x"].as_f64().unwrap();
    let y = params["y"].as_f64().unwrap();
    let penalty = if params["opt"] == json!("sgd") { 0.0 } else { 0.05 };
    (x - 0.3).powi(2) + (y - 0.7).powi(2) + penalty
}

/// The best value `method` finds in `budget` trials run one after another.
fn best_of(method: Method, seed: u64, budget: u64) -> f64 {
    let space = parameters(json!({
        "x": {"min": 0.0, "max": 1.0},
        "y": {"min": 0.0, "max": 1.0},
        "opt": {"values": ["adam", "sgd", "rmsprop"]},
    }));
    let mut done: Vec<(u64, Params, f64)> = Vec::new();
    for number in 0..budget {
        let observed: Vec<Observed> = done
            .iter()
            .map(|(n, params, value)| Observed {
                number: *n,
                params: params.clone(),
                outcome: Outcome::Finished(*value),
            })
            .collect();
        let params = propose(method, &space, Goal::Min, seed, number, &observed).unwrap();
        let value = known(&params);
        done.push((number, params, value));
    }
    done.iter().map(|(_, _, v)| *v).fold(f64::INFINITY, f64::min)
}

#[test]
fn tpe_beats_random_search_on_a_known_function_within_the_same_budget() {
    // 20 seeds, 50 trials each: TPE's median best must be at most half
    // of random search's, and TPE must win on at least 15 of the 20 seeds.
    let (mut tpe, mut random) = (Vec::new(), Vec::new());
    for seed in 0..20 {
        tpe.push(best_of(Method::Tpe, seed, 50));
        random.push(best_of(Method::Random, seed, 50));
    }
    let wins = tpe.iter().zip(&random).filter(|(t, r)| t < r).count();
    let median = |values: &mut Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    let (tpe_median, random_median) = (median(&mut tpe), median(&mut random));
    eprintln!(
        "50 trials, 20 seeds: median best {tpe_median:.5} (TPE), {random_median:.5} (random); TPE won {wins}"
    );
    assert!(
        tpe_median * 2.0 <= random_median && wins >= 15,
        "TPE median best {tpe_median:.5}, random {random_median:.5}; TPE won {wins} of 20"
    );
}

#[test]
fn running_trials_count_as_bad_so_concurrent_proposals_spread_out() {
    let space = parameters(json!({"x": {"min": 0.0, "max": 1.0}}));
    let params: Vec<Params> = (0..12)
        .map(|i| [("x".to_string(), json!(i as f64 / 12.0))].into())
        .collect();
    let finished: Vec<Observed> = params
        .iter()
        .enumerate()
        .map(|(i, p)| Observed {
            number: i as u64,
            params: p.clone(),
            outcome: Outcome::Finished((p["x"].as_f64().unwrap() - 0.5).abs()),
        })
        .collect();
    // Trials in flight at 0.5 keep the next proposals from piling there.
    let crowd: Vec<Params> = (0..20).map(|_| [("x".to_string(), json!(0.5))].into()).collect();
    let mut observed = finished.clone();
    observed.extend(crowd.iter().enumerate().map(|(i, p)| Observed {
        number: 100 + i as u64,
        params: p.clone(),
        outcome: Outcome::Running,
    }));
    // The mean distance of 60 proposals from 0.5.
    let spread = |observed: &[Observed]| {
        (200..260)
            .map(|n| {
                let p = propose(Method::Tpe, &space, Goal::Min, 9, n, observed).unwrap();
                (p["x"].as_f64().unwrap() - 0.5).abs()
            })
            .sum::<f64>()
            / 60.0
    };
    let (alone, crowded) = (spread(&finished), spread(&observed));
    assert!(
        crowded > alone * 1.5,
        "mean distance from 0.5: {crowded:.3} with 20 trials running there, {alone:.3} without"
    );
}
