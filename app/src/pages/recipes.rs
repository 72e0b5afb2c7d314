//! `/recipes`: the recipe catalog the signed-in user can see; a chosen
//! recipe (`?recipe=NAME[&version=N]`) with its keys, defaults, bounds,
//! rules and template; and a form generated from its schema that checks
//! or submits an experiment's job through the API, each problem shown
//! beside its field (the server's own check, the one `gpuctl` runs).

use crate::api::{SendExperiment, fetch};
use crate::view::error_text;
use crate::view::loaded;
use crate::view::query::link;
use gpuplane_api::Page;
use gpuplane_api::paths;
use gpuplane_api::recipe::{Recipe, RecipeKey, RecipeSummary};
use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use serde_json::{Map, Value, json};

#[component]
pub fn Recipes() -> impl IntoView {
    let query = use_query_map();
    let catalog = Resource::new(|| (), |_| fetch::<Page<RecipeSummary>>(paths::recipes()));
    let chosen = Signal::derive(move || {
        let query = query.read();
        let version = query.get("version").and_then(|v| v.parse::<i64>().ok());
        query.get("recipe").map(|name| (name, version))
    });
    let recipe = Resource::new(
        move || chosen.get(),
        |chosen| async move {
            match chosen {
                None => Ok(None),
                Some((name, Some(version))) => fetch::<Recipe>(paths::recipe_version(&name, version))
                    .await
                    .map(Some),
                Some((name, None)) => fetch::<Recipe>(paths::recipe(&name)).await.map(Some),
            }
        },
    );
    view! {
        <Title text="Recipes" />
        <h1>"Recipes"</h1>
        <section class="card" data-testid="recipes">
            {loaded(catalog, move |page: Page<RecipeSummary>| {
                if page.items.is_empty() {
                    return view! { <p class="muted">"No recipes yet: a platform admin publishes one with "
                        <code>"gpuctl recipe publish FILE"</code>"."</p> }.into_any();
                }
                view! {
                    <table>
                        <thead><tr><th>"Recipe"</th><th>"Latest"</th><th>"Versions"</th><th>"Project"</th><th>"Description"</th></tr></thead>
                        <tbody>{page.items.into_iter().map(|item| {
                            let href = link("/recipes", &query.read_untracked(), &[("recipe", Some(&item.name)), ("version", None)]);
                            let versions = item.versions.iter().map(|v| {
                                let href = link("/recipes", &query.read_untracked(), &[("recipe", Some(&item.name)), ("version", Some(&v.version.to_string()))]);
                                view! { <a href=href class:muted=v.deprecated title=if v.deprecated { "deprecated" } else { "" }>{format!("v{}", v.version)}</a> " " }
                            }).collect_view();
                            view! {
                                <tr data-recipe=item.name.clone()>
                                    <td><a href=href>{item.name.clone()}</a></td>
                                    <td>{item.latest.map_or("all deprecated".to_string(), |v| format!("v{v}"))}</td>
                                    <td>{versions}</td>
                                    <td>{item.project.clone().unwrap_or_else(|| "(all)".into())}</td>
                                    <td>{item.description.lines().next().unwrap_or_default().to_string()}</td>
                                </tr>
                            }
                        }).collect_view()}</tbody>
                    </table>
                }.into_any()
            })}
        </section>
        {loaded(recipe, move |recipe: Option<Recipe>| recipe.map(|recipe| view! {
            <RecipeDetail recipe=recipe.clone() />
            <ExperimentForm recipe=recipe />
        }))}
    }
}

/// A version's keys, rules and template.
#[component]
fn RecipeDetail(recipe: Recipe) -> impl IntoView {
    let template = serde_json::to_string_pretty(&recipe.template).unwrap_or_default();
    view! {
        <section class="card" data-testid="recipe-detail">
            <h2>{format!("{} v{}", recipe.name, recipe.version)}
                {recipe.deprecated.then(|| view! { " " <span class="badge">"deprecated"</span> })}</h2>
            <p>{recipe.description.clone()}</p>
            <dl class="details">
                <dt>"Runtime"</dt><dd>{recipe.runtime_id.clone()}</dd>
                <dt>"Contract"</dt><dd class="mono">{recipe.contract.clone()}</dd>
                <dt>"Observability"</dt><dd>{recipe.observability.clone()}</dd>
                <dt>"Hub token"</dt><dd>{if recipe.hf_token { "given to its jobs as HF_TOKEN; " } else { "not given to its jobs; " }}
                    <a href="/hf">"link yours"</a>" to use gated models and datasets"</dd>
                <dt>"Start one"</dt><dd><code>{format!("gpuctl exp init DIR --recipe {}@{}", recipe.name, recipe.version)}</code></dd>
            </dl>
            <div class="table-scroll"><table data-testid="recipe-keys">
                <thead><tr><th>"Key"</th><th>"Type"</th><th>"Default"</th><th>"Bounds"</th><th>"Description"</th></tr></thead>
                <tbody>{recipe.keys.iter().map(|key| view! {
                    <tr data-key=key.name.clone()>
                        <td class="mono">{key.name.clone()}</td>
                        <td>{key.kind.clone()}{key.hub.clone().map(|hub| format!(" (Hub {hub})"))}</td>
                        <td class="mono">{match &key.default {
                            Some(value) => value.to_string(),
                            None if key.required => "required".to_string(),
                            None => "–".to_string(),
                        }}</td>
                        <td>{key.constraint.clone().unwrap_or_default()}</td>
                        <td>{key.description.clone().unwrap_or_default()}</td>
                    </tr>
                }).collect_view()}</tbody>
            </table></div>
            {(!recipe.rules.is_empty()).then(|| view! {
                <h3>"Rules"</h3>
                <ul data-testid="recipe-rules">{recipe.rules.iter().map(|rule| view! { <li>{rule.clone()}</li> }).collect_view()}</ul>
            })}
            <details><summary>"Template"</summary><pre>{template}</pre></details>
        </section>
    }
}

/// One form value as the config holds it: a number for numeric keys when it
/// reads as one (else the text, which the server names as the wrong type).
fn config_value(key: &RecipeKey, text: &str) -> Option<Value> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    Some(match key.kind.as_str() {
        "integer" => text
            .parse::<i64>()
            .map(Value::from)
            .unwrap_or_else(|_| Value::from(text)),
        "number" => text
            .parse::<f64>()
            .ok()
            .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
            .unwrap_or_else(|| Value::from(text)),
        "boolean" => Value::Bool(text == "true"),
        _ => Value::from(text),
    })
}

fn shown(value: &Option<Value>) -> String {
    match value {
        Some(Value::String(text)) => text.clone(),
        Some(value) => value.to_string(),
        None => String::new(),
    }
}

/// The experiment form: one input per config key, with its default.
#[component]
fn ExperimentForm(recipe: Recipe) -> impl IntoView {
    let send = ServerAction::<SendExperiment>::new();
    let fields: Vec<(RecipeKey, RwSignal<String>)> = recipe
        .keys
        .iter()
        .map(|key| (key.clone(), RwSignal::new(shown(&key.default))))
        .collect();
    let project = RwSignal::new(recipe.project.clone().unwrap_or_else(|| "default".into()));
    let exp_dir = RwSignal::new(String::new());
    let job_name = RwSignal::new(String::new());
    let observability_url = RwSignal::new(String::new());
    let external = recipe.observability == "external";
    let body = {
        let fields = fields.clone();
        let contract = recipe.contract.clone();
        move || {
            let mut config = Map::new();
            for (key, value) in &fields {
                if let Some(value) = config_value(key, &value.get_untracked()) {
                    config.insert(key.name.clone(), value);
                }
            }
            let optional = |signal: RwSignal<String>| {
                let text = signal.get_untracked().trim().to_string();
                (!text.is_empty()).then_some(text)
            };
            json!({
                "contract": contract,
                "config": config,
                "project": project.get_untracked().trim(),
                "exp_dir": optional(exp_dir),
                "name": optional(job_name),
                "observability_url": optional(observability_url),
            })
            .to_string()
        }
    };
    let (name, version) = (recipe.name.clone(), recipe.version);
    let dispatch = {
        let body = body.clone();
        move |submit: bool| {
            send.dispatch(SendExperiment {
                name: name.clone(),
                version,
                body: body(),
                submit,
            });
        }
    };
    let problem = move |field: String| {
        send.value()
            .get()
            .and_then(Result::ok)
            .and_then(|answer| answer.details.into_iter().find(|d| d.field == field))
            .map(|detail| view! { <span class="field-error" role="alert" data-testid=format!("error-{field}")>{detail.message}</span> })
    };
    let check = dispatch.clone();
    // The fields that show their own problem; any other is shown below.
    let mut placed: Vec<String> = recipe
        .keys
        .iter()
        .map(|key| format!("config.{}", key.name))
        .collect();
    placed.extend(["project", "exp_dir", "name"].map(String::from));
    if external {
        placed.push("observability_url".into());
    }
    view! {
        <section class="card" data-testid="experiment-form">
            <h2>"Run an experiment"</h2>
            <p class="muted">"Checked by the server with the recipe's own rules before anything queues. From here the job \
                gets the config; to ship an experiment folder with it, submit from a terminal (gpuctl job submit --exp DIR), \
                or name the folder's path on a filesystem the agents' hosts share."</p>
            <form class="stacked-form" on:submit=move |event: leptos::ev::SubmitEvent| { event.prevent_default(); dispatch(true); }>
                {fields.iter().map(|(key, value)| {
                    let field = format!("config.{}", key.name);
                    let value = *value;
                    let input = if !key.choices.is_empty() {
                        // The schema's `enum`: only its values, and none while a required key has no default.
                        let options = key.choices.iter().map(|choice| {
                            let text = shown(&Some(choice.clone()));
                            let (current, label) = (text.clone(), text.clone());
                            view! { <option value=text selected=move || value.get() == current>{label}</option> }
                        }).collect_view();
                        view! {
                            <select name=key.name.clone() on:change=move |event| value.set(event_target_value(&event))>
                                {key.default.is_none().then(|| view! { <option value="" selected=move || value.get().is_empty()>"—"</option> })}
                                {options}
                            </select>
                        }.into_any()
                    } else if key.kind == "boolean" {
                        view! {
                            <input type="checkbox" name=key.name.clone() prop:checked=move || value.get() == "true"
                                on:change=move |event| value.set(if event_target_checked(&event) { "true".into() } else { "false".into() }) />
                        }.into_any()
                    } else {
                        view! {
                            <input name=key.name.clone() bind:value=value
                                inputmode=if key.kind == "string" { "text" } else { "decimal" }
                                placeholder=if key.required { "required" } else { "" } />
                        }.into_any()
                    };
                    view! {
                        <label data-field=key.name.clone()>
                            <span class="mono">{key.name.clone()}</span>
                            {input}
                            <span class="muted">{key.description.clone().unwrap_or_default()}
                                {key.constraint.clone().map(|c| format!(" ({c})"))}</span>
                            {move || problem(field.clone())}
                        </label>
                    }
                }).collect_view()}
                <label data-field="project">"Project" <input name="project" bind:value=project />{move || problem("project".into())}</label>
                <label data-field="exp_dir">"Experiment folder (absolute path on the agents' hosts)"
                    <input name="exp_dir" bind:value=exp_dir placeholder="/shared/experiments/my-sft" />{move || problem("exp_dir".into())}</label>
                <label data-field="name">"Job name (optional)" <input name="name" bind:value=job_name />{move || problem("name".into())}</label>
                {external.then(|| view! {
                    <label data-field="observability_url">"Observability URL (required: this recipe reports elsewhere)"
                        <input name="observability_url" bind:value=observability_url placeholder="https://…" />
                        {move || problem("observability_url".into())}</label>
                })}
                <div class="inline-form">
                    <button type="button" data-testid="experiment-check" on:click=move |_| check(false)>"Check"</button>
                    <button type="submit" data-testid="experiment-submit">"Submit"</button>
                </div>
            </form>
            {move || send.value().get().map(|result| match result {
                Err(error) => view! { <p class="error" role="alert">{error_text(&error)}</p> }.into_any(),
                Ok(answer) => {
                    let elsewhere: Vec<String> = answer
                        .details
                        .iter()
                        .filter(|detail| !placed.contains(&detail.field))
                        .map(|detail| format!("{}: {}", detail.field, detail.message))
                        .collect();
                    let refused = match (&answer.refused, answer.details.len() - elsewhere.len()) {
                        (None, _) => None,
                        (Some(message), 0) => Some(message.clone()),
                        (Some(_), beside) => Some(format!(
                            "{beside} problem{} shown beside {}{}",
                            if beside == 1 { "" } else { "s" },
                            if beside == 1 { "its field" } else { "their fields" },
                            if elsewhere.is_empty() { String::new() } else { format!("; {}", elsewhere.join("; ")) }
                        )),
                    };
                    let clean = refused.is_none() && answer.job_id.is_none();
                    view! {
                        {refused.map(|message| view! { <p class="error" role="alert" data-testid="experiment-refused">{message}</p> })}
                        {answer.job_id.map(|id| view! {
                            <p class="info" role="status">"Submitted " <a href=format!("/jobs/{id}") data-testid="experiment-job">{id.clone()}</a></p>
                        })}
                        {answer.warnings.into_iter().map(|w| view! { <p class="notice warn">{w}</p> }).collect_view()}
                        {answer.notes.into_iter().map(|n| view! { <p class="muted">"If submitted now it would wait: " {n}</p> }).collect_view()}
                        {clean.then(|| view! { <p class="info" role="status" data-testid="experiment-valid">"The config is valid for this recipe."</p> })}
                    }.into_any()
                }
            })}
        </section>
    }
}
