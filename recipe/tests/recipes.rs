//! The recipe file, configs and upgrades, on the example recipes in
//! `tests/fixtures` (the ones the user guide walks through).

use expect_test::expect;
use gpuplane_recipe::{Recipe, changes, config, template};
use serde_json::{Map, Value, json};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn v1() -> Recipe {
    Recipe::parse(&fixture("sft.v1.toml")).unwrap()
}

fn object(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn shown(errors: &[gpuplane_api::error::FieldError]) -> String {
    errors
        .iter()
        .map(|e| format!("{}: {}\n", e.field, e.message))
        .collect()
}

#[test]
fn the_example_recipe_parses_and_its_contract_is_stable() {
    let recipe = v1();
    assert_eq!(recipe.name, "sft");
    assert!(recipe.struct_mode());
    assert_eq!(
        recipe.hub_keys(),
        vec![("base_model".to_string(), "model".to_string())]
    );
    // The same file, reformatted, is the same contract; a changed bound is not.
    let reordered = fixture("sft.v1.toml").replace("# A recipe", "\n\n# A recipe");
    assert_eq!(Recipe::parse(&reordered).unwrap().contract(), recipe.contract());
    let wider = fixture("sft.v1.toml").replace("maximum = 8", "maximum = 9");
    assert_ne!(Recipe::parse(&wider).unwrap().contract(), recipe.contract());
    // The description does not change what runs.
    let reworded = fixture("sft.v1.toml").replace("Supervised", "Plain");
    assert_eq!(Recipe::parse(&reworded).unwrap().contract(), recipe.contract());
    assert!(recipe.contract().starts_with("sha256:"));
}

#[test]
fn a_config_with_three_mistakes_gets_three_errors_at_once() {
    let recipe = v1();
    let config = object(json!({
        "base_model": "org/model",
        "warmup_step": 10,
        "learning_rate": 3.0,
        "global_batch_size": 60,
    }));
    let errors = config::check(&recipe, &config).unwrap_err();
    expect![[r#"
        config.learning_rate: 3.0 is greater than the maximum of 1
        config.warmup_step: is not a key of recipe sft v1 (struct mode: unknown keys are refused); did you mean `warmup_steps`?
        config.global_batch_size: global_batch_size (60) must be divisible by micro_batch_size × gpus = 8 (micro_batch_size 8, gpus 1)
    "#]]
    .assert_eq(&shown(&errors));
    // A rule on a key the schema already refused says nothing more.
    let config = object(json!({"base_model": "org/model", "warmup_steps": -1, "max_steps": 0}));
    let errors = config::check(&recipe, &config).unwrap_err();
    expect![[r#"
        config.max_steps: 0 is less than the minimum of 1
        config.warmup_steps: -1 is less than the minimum of 0
    "#]]
    .assert_eq(&shown(&errors));
    let config = object(json!({"base_model": "org/model", "warmup_steps": 2000}));
    let errors = config::check(&recipe, &config).unwrap_err();
    expect![[r#"
        config.warmup_steps: warmup_steps <= max_steps must hold: warmup_steps is 2000, max_steps is 1000
    "#]]
    .assert_eq(&shown(&errors));
}

#[test]
fn a_missing_required_key_and_a_wrong_type_are_named() {
    let errors = config::check(&v1(), &object(json!({"gpus": "two"}))).unwrap_err();
    expect![[r#"
        config.gpus: "two" is not of type "integer"
        config.base_model: is required (The Hub model to fine-tune, as org/name.)
    "#]]
    .assert_eq(&shown(&errors));
    // Nested values are not config values.
    let errors = config::check(&v1(), &object(json!({"base_model": {"a": 1}}))).unwrap_err();
    assert_eq!(errors[0].field, "config.base_model");
}

#[test]
fn a_good_config_renders_the_job_with_typed_placeholders() {
    let config = object(json!({"base_model": "org/model", "gpus": 2, "global_batch_size": 32}));
    let checked = config::check(&v1(), &config).unwrap();
    assert_eq!(checked.spec.resources.gpu, 2);
    assert_eq!(checked.spec.name, "sft");
    assert_eq!(checked.spec.env["BASE_MODEL"], "org/model");
    assert_eq!(checked.spec.env["LEARNING_RATE"], "0.0001");
    assert_eq!(checked.spec.command, vec!["sh", "train.sh"]);
    // Defaults fill what the config leaves out.
    assert_eq!(checked.config["max_steps"], json!(1000));
    assert_eq!(template::placeholders(&Value::Object(v1().template)).len(), 4);
}

#[test]
fn a_bad_recipe_file_names_every_problem() {
    let source = r#"
name = "Bad Name"
version = 0
runtime_id = "torch 2"

[template]
comand = ["python"]

[schema]
type = "object"
[schema.properties.nested]
type = "object"
[schema.properties.model]
type = "integer"
x-gpuplane-hf = "model"
[schema.properties.lr]
type = "number"
maximum = 1
default = 2

[[rules]]
divisible = ["lr", "missing"]
"#;
    let errors = Recipe::parse(source).unwrap_err();
    expect![[r#"
        name: is 1-64 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit
        version: is a whole number from 1 to 1000000
        runtime_id: is 1-200 printable characters without spaces
        schema.properties.model.x-gpuplane-hf: is "model" or "dataset", on a string key
        schema.properties.nested.type: is one of string, number, integer, boolean (a run's config holds scalars)
    "#]]
    .assert_eq(&shown(&errors));
    let source = r#"
name = "ok"
version = 1
runtime_id = "r"
[template]
comand = ["python"]
[schema]
type = "object"
[schema.properties.lr]
type = "number"
maximum = 1
default = 2
[[rules]]
divisible = ["lr", "missing"]
[[rules]]
compare = ["lr", "=<", "lr"]
"#;
    let errors = Recipe::parse(source).unwrap_err();
    expect![[r#"
        schema.properties.lr.default: does not pass its own schema: 2 is greater than the maximum of 1
    "#]]
    .assert_eq(&shown(&errors));
    let fixed = source.replace("default = 2", "default = 0.5");
    let errors = Recipe::parse(&fixed).unwrap_err();
    expect![[r#"
        rules[0].divisible: `lr` is a number; this rule takes integers
        rules[0].divisible: `missing` is not a key of the schema, nor `gpus` or `nodes`
        rules[1].compare: `=<` is not one of < <= > >= == !=
        template.comand: is not a field a template sets (those are name, kind, command, working_dir, env, runner, image, resources, node_selector, max_attempts, retry_cooldown_s, time_limit_s, watch_dirs, tags, slurm); did you mean `command`?
    "#]]
    .assert_eq(&shown(&errors));
    // A template that renders to an invalid spec is refused at publish.
    let empty_command = r#"
name = "ok"
version = 1
runtime_id = "r"
[template]
command = []
[schema]
type = "object"
"#;
    let errors = Recipe::parse(empty_command).unwrap_err();
    assert_eq!(errors[0].field, "template.command", "{errors:?}");
    // Unknown top-level keys and a remote $ref are refused too.
    assert!(Recipe::parse(&format!("{empty_command}\nextra = 1")).is_err());
    let remote = r#"
name = "ok"
version = 1
runtime_id = "r"
[template]
command = ["python"]
[schema]
type = "object"
"$ref" = "http://127.0.0.1:9/schema.json"
"#;
    let errors = Recipe::parse(remote).unwrap_err();
    assert_eq!(errors[0].field, "schema", "{errors:?}");
}

#[test]
fn the_changes_between_versions_are_named_and_a_config_carries_over() {
    let v2 = Recipe::parse(&fixture("sft.v2.toml")).unwrap();
    expect![[r#"
        runtime: torch-2.4-cu124 → torch-2.5-cu124
        key added: seed (default 0)
        gpus: maximum 8 → 16
    "#]]
    .assert_eq(
        &changes::changes(&v1(), &v2)
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );
    let mine = object(json!({"base_model": "org/model", "learning_rate": 0.0003}));
    let (carried, dropped) = changes::carry(&mine, &v2);
    assert!(dropped.is_empty());
    assert_eq!(carried["learning_rate"], json!(0.0003), "the user's value stays");
    assert_eq!(carried["seed"], json!(0), "a new key comes with its default");
    let stale = object(json!({"base_model": "org/model", "retired_key": 1}));
    assert_eq!(changes::carry(&stale, &v2).1, vec!["retired_key"]);
}

#[test]
fn the_manuals_example_recipe_is_a_valid_recipe() {
    let page = std::fs::read_to_string(format!(
        "{}/../docs/src/reference/recipe-file.md",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let blocks: Vec<&str> = page
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .filter(|block| block.contains("runtime_id"))
        .collect();
    assert!(!blocks.is_empty(), "the page shows a recipe");
    for block in blocks {
        let recipe = Recipe::parse(block).unwrap_or_else(|errors| panic!("{}", shown(&errors)));
        let config = object(json!({"base_model": "org/model"}));
        config::check(&recipe, &config).unwrap_or_else(|errors| panic!("{}", shown(&errors)));
    }
}

#[test]
fn a_hub_id_must_be_org_slash_name() {
    for id in [
        "gpt2",
        "org/",
        "/name",
        "a/b/c",
        "org/na me",
        "-org/name",
        "org/name.",
        "o..g/name",
    ] {
        let errors = config::check(&v1(), &object(json!({"base_model": id}))).unwrap_err();
        assert_eq!(errors[0].field, "config.base_model", "{id}");
        assert!(
            errors[0].message.contains("full org/name"),
            "{id}: {}",
            errors[0].message
        );
    }
    assert!(config::check(&v1(), &object(json!({"base_model": "meta-llama/Llama-3.1-8B"}))).is_ok());
}
