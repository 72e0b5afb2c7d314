use super::*;
use serde_json::json;

fn spec(value: Value) -> SweepSpec {
    serde_json::from_value(value).expect("a sweep file")
}

fn errors(value: Value) -> Vec<(String, String)> {
    let errors = spec(value).check(7).expect_err("refused");
    errors.into_iter().map(|e| (e.field, e.message)).collect()
}

fn distribution(value: Value) -> Distribution {
    space::parameter("p", &value).expect("a parameter").distribution
}

#[test]
fn a_wandb_sweep_file_is_read_with_its_own_words() {
    // As W&B's documentation writes one (bayes, run_cap, hyperband's
    // min_iter/eta/s, program and the default command).
    let checked = spec(json!({
        "program": "train.py",
        "method": "bayes",
        "metric": {"name": "val_loss", "goal": "minimize"},
        "parameters": {
            "learning_rate": {"min": 0.0001, "max": 0.1},
            "optimizer": {"values": ["adam", "sgd"]},
            "epochs": {"value": 10},
            "batch_size": {"distribution": "q_log_uniform_values", "q": 8, "min": 32, "max": 256},
        },
        "early_terminate": {"type": "hyperband", "min_iter": 3, "eta": 3, "s": 2},
        "run_cap": 20,
    }))
    .check(7)
    .expect("accepted");
    assert_eq!(checked.method, Method::Tpe);
    assert_eq!(checked.name, "train");
    assert_eq!(checked.project, "default");
    assert_eq!(checked.max_trials, 20);
    assert_eq!(checked.seed, 7);
    assert_eq!(checked.metric.as_ref().map(|m| m.goal), Some(Goal::Min));
    assert_eq!(
        checked.early_stop,
        Some(EarlyStop::Hyperband {
            min_step: 3,
            max_step: 26,
            reduction_factor: 3,
            bootstrap_count: 0
        })
    );
    assert_eq!(checked.job["command"], json!(DEFAULT_COMMAND));
    assert_eq!(checked.job["name"], json!("train"));
    let kinds: Vec<&str> = checked.parameters.iter().map(|p| p.distribution.kind()).collect();
    assert_eq!(
        kinds,
        ["q_log_uniform_values", "constant", "uniform", "categorical"]
    );
    let params: Params = [
        ("batch_size", json!(64)),
        ("learning_rate", json!(0.01)),
        ("optimizer", json!("adam")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let command: Vec<String> = DEFAULT_COMMAND.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        trial_command(&command, checked.program.as_deref(), &params),
        [
            "/usr/bin/env",
            "python3",
            "train.py",
            "--batch_size=64",
            "--learning_rate=0.01",
            "--optimizer=adam"
        ]
    );
}

#[test]
fn distributions_are_inferred_as_wandb_infers_them() {
    assert_eq!(distribution(json!({"min": 1, "max": 4})).kind(), "int_uniform");
    assert_eq!(distribution(json!({"min": 1.0, "max": 4})).kind(), "uniform");
    assert_eq!(distribution(json!({"values": [1, 2]})).kind(), "categorical");
    assert_eq!(distribution(json!({"value": "x"})).kind(), "constant");
    assert_eq!(distribution(json!({"mu": 0.5})).kind(), "normal");
    // int_uniform takes each whole number from min to max, both included.
    let ints = distribution(json!({"min": 1, "max": 4}));
    assert_eq!(
        ints.grid_values(),
        Some(vec![json!(1), json!(2), json!(3), json!(4)])
    );
    assert_eq!(ints.value_at(0.5), json!(1));
    assert_eq!(ints.value_at(4.49), json!(4));
    // log_uniform's bounds are exponents of e; *_values' are values.
    let exponents = distribution(json!({"distribution": "log_uniform", "min": -2, "max": 0}));
    assert_eq!(exponents.value_at(-2.0).as_f64(), Some((-2.0f64).exp()));
    let values = distribution(json!({"distribution": "log_uniform_values", "min": 0.001, "max": 0.1}));
    let lowest = values.value_at(f64::NEG_INFINITY).as_f64().unwrap();
    assert!((lowest - 0.001).abs() < 1e-12, "{lowest}");
    assert_eq!(values.coordinate_of(&json!(0.01)), Some(0.01f64.ln()));
    // q rounds to a multiple of q, 1 by default, and whole numbers stay whole.
    let batch = distribution(json!({"distribution": "q_log_uniform_values", "q": 8, "min": 32, "max": 256}));
    assert_eq!(batch.value_at(50f64.ln()), json!(48));
    let q_default = distribution(json!({"distribution": "q_uniform", "min": 0, "max": 10}));
    assert_eq!(q_default.value_at(3.4), json!(3));
    let halves = distribution(json!({"distribution": "q_uniform", "min": 0, "max": 1, "q": 0.5}));
    assert_eq!(
        halves.grid_values(),
        Some(vec![json!(0.0), json!(0.5), json!(1.0)])
    );
    // inv_log_uniform_values is log-uniform over the same values.
    let inverse = distribution(json!({"distribution": "inv_log_uniform_values", "min": 0.1, "max": 10}));
    assert_eq!(inverse.coordinate_of(&json!(1.0)), Some(0.0));
}

#[test]
fn each_mistake_is_named_by_its_field() {
    let base = || {
        json!({
            "method": "random",
            "metric": {"name": "loss"},
            "parameters": {"lr": {"min": 0.1, "max": 1.0}},
            "max_trials": 5,
            "job": {"command": ["python3", "train.py", "--lr=${lr}"]},
        })
    };
    assert!(spec(base()).check(1).is_ok());
    let with = |path: &[&str], value: Value| {
        let mut file = base();
        let mut at = &mut file;
        for key in &path[..path.len() - 1] {
            at = &mut at[*key];
        }
        at[path[path.len() - 1]] = value;
        errors(file)
    };
    let field_of = |errors: Vec<(String, String)>| errors.into_iter().map(|(f, _)| f).collect::<Vec<_>>();
    assert_eq!(
        field_of(with(&["parameters", "lr", "max"], json!(0.01))),
        ["parameters.lr.max"]
    );
    assert_eq!(
        with(&["parameters", "lr", "maxx"], json!(1)),
        [(
            "parameters.lr.maxx".to_string(),
            "unknown key (did you mean `max`?)".to_string()
        )]
    );
    assert_eq!(
        field_of(with(&["parameters", "lr", "distribution"], json!("unifrom"))),
        ["parameters.lr.distribution"]
    );
    assert_eq!(
        field_of(with(&["parameters", "bad name"], json!({"value": 1}))),
        ["parameters.bad name"]
    );
    assert_eq!(field_of(with(&["max_trials"], json!(0))), ["max_trials"]);
    assert_eq!(field_of(with(&["method"], json!("grid"))), ["parameters.lr"]);
    // Random search draws from a normal; TPE searches bounded ranges only.
    let mut random = base();
    random["parameters"]["lr"] = json!({"distribution": "normal"});
    assert!(spec(random).check(1).is_ok());
    let mut tpe = base();
    tpe["method"] = json!("tpe");
    tpe["parameters"]["lr"] = json!({"distribution": "normal"});
    assert_eq!(field_of(errors(tpe)), ["parameters.lr"]);
    let mut no_trials = base();
    no_trials.as_object_mut().unwrap().remove("max_trials");
    assert_eq!(field_of(errors(no_trials)), ["max_trials"]);
    let mut no_metric = base();
    no_metric.as_object_mut().unwrap().remove("metric");
    no_metric["early_terminate"] = json!({"type": "asha", "min_step": 1});
    assert_eq!(field_of(errors(no_metric)), ["metric"]);
    assert_eq!(
        field_of(with(&["early_terminate"], json!({"type": "hyperband"}))),
        ["early_terminate.max_step"]
    );
    assert_eq!(
        field_of(with(&["early_terminate"], json!({"type": "median"}))),
        ["early_terminate.type"]
    );
    assert_eq!(
        field_of(with(&["early_terminate"], json!({"type": "asha", "eta": 1}))),
        ["early_terminate.reduction_factor"]
    );
    let mut two_projects = base();
    two_projects["project"] = json!("vision");
    two_projects["job"]["project"] = json!("nlp");
    assert_eq!(field_of(errors(two_projects)), ["project"]);
    let mut no_command = base();
    no_command["job"] = json!({});
    assert_eq!(field_of(errors(no_command)), ["job.command"]);
    assert!(
        serde_json::from_value::<SweepSpec>(json!({"method": "random", "parameters": {}, "programme": "x"}))
            .is_err()
    );
}

#[test]
fn a_grid_runs_every_combination_once_unless_capped() {
    let grid = |cap: Option<u32>| {
        let mut file = json!({
            "method": "grid",
            "parameters": {"a": {"values": [1, 2, 3]}, "b": {"min": 0, "max": 1}, "c": {"value": "x"}},
            "job": {"command": ["run", "${a}", "${b}"]},
        });
        if let Some(cap) = cap {
            file["max_trials"] = json!(cap);
        }
        spec(file).check(0).expect("accepted").max_trials
    };
    assert_eq!(grid(None), 6);
    assert_eq!(grid(Some(4)), 4);
    assert_eq!(grid(Some(100)), 6);
}

#[test]
fn a_trial_command_fills_each_parameter_where_it_is_named() {
    let params: Params = [
        ("lr", json!(0.001)),
        ("opt", json!("adam")),
        ("deep", json!(true)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let command: Vec<String> = [
        "python3",
        "train.py",
        "--lr=${lr}",
        "${opt}",
        "${missing}",
        "${args_json}",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        trial_command(&command, None, &params),
        [
            "python3",
            "train.py",
            "--lr=0.001",
            "adam",
            "${missing}",
            r#"{"deep":true,"lr":0.001,"opt":"adam"}"#
        ]
    );
}
