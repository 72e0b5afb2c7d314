//! What changed between two versions of a recipe (`gpuctl recipe status`),
//! and a config carried over to a new version (`gpuctl recipe upgrade`).

use crate::file::Recipe;
use serde_json::{Map, Value};

/// The schema words whose change `recipe status` names per key.
const WATCHED: &[&str] = &[
    "type",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    crate::file::HUB_MARK,
];

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "none".to_string(), Value::to_string)
}

/// Every difference that matters to a user of `old` moving to `new`, one
/// line each.
pub fn changes(old: &Recipe, new: &Recipe) -> Vec<String> {
    let mut lines = Vec::new();
    if old.runtime_id != new.runtime_id {
        lines.push(format!("runtime: {} → {}", old.runtime_id, new.runtime_id));
    }
    let (before, after) = (old.properties(), new.properties());
    for (key, property) in &after {
        if !before.contains_key(key) {
            lines.push(format!(
                "key added: {key} (default {})",
                shown(property.get("default"))
            ));
        }
    }
    for key in before.keys() {
        if !after.contains_key(key) {
            lines.push(format!("key removed: {key}"));
        }
    }
    for (key, was) in &before {
        let Some(now) = after.get(key) else { continue };
        for word in WATCHED {
            if was.get(*word) != now.get(*word) {
                lines.push(format!(
                    "{key}: {word} {} → {}",
                    shown(was.get(*word)),
                    shown(now.get(*word))
                ));
            }
        }
    }
    let (required_before, required_after) = (old.required(), new.required());
    for key in &required_after {
        if !required_before.contains(key) && before.contains_key(key) {
            lines.push(format!("{key}: now required"));
        }
    }
    for key in &required_before {
        if !required_after.contains(key) && after.contains_key(key) {
            lines.push(format!("{key}: no longer required"));
        }
    }
    if old.struct_mode() != new.struct_mode() {
        lines.push(format!(
            "struct mode: {} → {}",
            old.struct_mode(),
            new.struct_mode()
        ));
    }
    let fields = old.template.keys().chain(new.template.keys());
    let mut seen = Vec::new();
    for field in fields {
        if seen.contains(field) {
            continue;
        }
        seen.push(field.clone());
        let (was, now) = (old.template.get(field), new.template.get(field));
        if was != now {
            lines.push(format!("template.{field}: {} → {}", shown(was), shown(now)));
        }
    }
    let rules = |recipe: &Recipe| -> Vec<String> { recipe.rules.iter().map(|r| r.describe()).collect() };
    let (rules_before, rules_after) = (rules(old), rules(new));
    for rule in &rules_after {
        if !rules_before.contains(rule) {
            lines.push(format!("rule added: {rule}"));
        }
    }
    for rule in &rules_before {
        if !rules_after.contains(rule) {
            lines.push(format!("rule removed: {rule}"));
        }
    }
    if old.observability != new.observability {
        lines.push(format!(
            "observability: {} → {}",
            old.observability.as_str(),
            new.observability.as_str()
        ));
    }
    if old.hf_token != new.hf_token {
        lines.push(format!("hf_token: {} → {}", old.hf_token, new.hf_token));
    }
    lines
}

/// `config` moved to `new`: the user's values of keys `new` still has,
/// new keys with their defaults; and the keys dropped because `new` has
/// them no more.
pub fn carry(config: &Map<String, Value>, new: &Recipe) -> (Map<String, Value>, Vec<String>) {
    let properties = new.properties();
    let mut carried = Map::new();
    let mut dropped = Vec::new();
    for (key, value) in config {
        if properties.contains_key(key) || !new.struct_mode() {
            carried.insert(key.clone(), value.clone());
        } else {
            dropped.push(key.clone());
        }
    }
    for (key, value) in new.defaults() {
        carried.entry(key).or_insert(value);
    }
    (carried, dropped)
}
