//! `gpuctl recipe …`: publish, list, show and deprecate recipes (the
//! catalog), and `status`/`upgrade` of an experiment folder's lock.
//! `gpuctl exp init` starts an experiment from a recipe.

use crate::Output;
use crate::client::{CliError, Client};
use crate::commands::experiments::{self, parse_reference, recipe_path, refused};
use crate::exit::Failure;
use gpuplane_api::Page;
use gpuplane_api::recipe::{NewRecipe, Recipe, RecipeSummary};
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum RecipeCommand {
    /// Publish a recipe file (TOML; server admins, or the admins of the
    /// project it names). A published version never changes.
    Publish { file: PathBuf },
    /// The recipes you can see, with their versions.
    List,
    /// A recipe's keys, defaults, rules and template (NAME: its newest version).
    Show {
        /// NAME or NAME@VERSION.
        recipe: String,
        /// Print the recipe file as published.
        #[arg(long)]
        source: bool,
    },
    /// Hide NAME@VERSION from new experiments; experiments locked to it keep working.
    Deprecate {
        /// NAME@VERSION.
        recipe: String,
    },
    /// What the catalog's newest version changes for an experiment folder.
    Status { dir: PathBuf },
    /// Move an experiment folder to the catalog's newest version, keeping
    /// your config values and adding new keys with their defaults.
    Upgrade { dir: PathBuf },
}

#[derive(Debug, clap::Subcommand)]
pub enum ExpCommand {
    /// Start an experiment folder from a recipe: experiment.toml (the
    /// lock), config.yaml (defaults and descriptions), and train.sh for
    /// recipes that run your own code.
    Init {
        dir: PathBuf,
        /// NAME or NAME@VERSION (default: the newest version).
        #[arg(long)]
        recipe: String,
        /// The project its jobs go to (default: default).
        #[arg(long)]
        project: Option<String>,
    },
}

pub async fn run_exp(client: &Client, command: ExpCommand, out: &Output) -> Result<(), CliError> {
    match command {
        ExpCommand::Init { dir, recipe, project } => {
            experiments::init(client, &dir, &recipe, project, out).await
        }
    }
}

pub async fn run(client: &Client, command: RecipeCommand, out: &Output) -> Result<(), CliError> {
    match command {
        RecipeCommand::Publish { file } => {
            let source = std::fs::read_to_string(&file).map_err(|error| {
                CliError::new(
                    Failure::Invalid,
                    "invalid_recipe",
                    format!("cannot read {}: {error}", file.display()),
                )
            })?;
            // The same checks as the server's, before anything is sent.
            gpuplane_recipe::Recipe::parse(&source)
                .map_err(|details| refused(&file.display().to_string(), details))?;
            let recipe: Recipe = client.post("recipes", &NewRecipe { source }).await?;
            out.emit(&recipe, |recipe| {
                format!(
                    "Published recipe {} v{} ({})\nstart an experiment: gpuctl exp init DIR --recipe {}@{}",
                    recipe.name, recipe.version, recipe.contract, recipe.name, recipe.version
                )
            });
        }
        RecipeCommand::List => {
            let page: Page<RecipeSummary> = client.get("recipes").await?;
            out.emit(&page.items, |items| {
                if items.is_empty() {
                    return "No recipes yet: publish one with `gpuctl recipe publish FILE`".into();
                }
                let mut text = format!(
                    "{:<24} {:<8} {:<12} {}",
                    "NAME", "LATEST", "PROJECT", "DESCRIPTION"
                );
                for item in items {
                    let latest = item.latest.map_or("-".to_string(), |v| format!("v{v}"));
                    let first_line = item.description.lines().next().unwrap_or_default();
                    text.push_str(&format!(
                        "\n{:<24} {:<8} {:<12} {}",
                        item.name,
                        latest,
                        item.project.as_deref().unwrap_or("(all)"),
                        first_line
                    ));
                }
                text
            });
        }
        RecipeCommand::Show { recipe, source } => {
            let (name, version) = parse_reference(&recipe)
                .map_err(|message| CliError::new(Failure::Invalid, "invalid_reference", message))?;
            let recipe: Recipe = client.get(&recipe_path(&name, version)).await?;
            out.emit(&recipe, |recipe| {
                if source {
                    recipe.source.clone()
                } else {
                    describe(recipe)
                }
            });
        }
        RecipeCommand::Deprecate { recipe } => {
            let (name, version) = parse_reference(&recipe)
                .map_err(|message| CliError::new(Failure::Invalid, "invalid_reference", message))?;
            let Some(version) = version else {
                return Err(CliError::new(
                    Failure::Invalid,
                    "invalid_reference",
                    "name the version: gpuctl recipe deprecate NAME@VERSION",
                ));
            };
            let recipe: Recipe = client
                .post(&format!("recipes/{name}/{version}/deprecate"), &())
                .await?;
            out.emit(&recipe, |recipe| {
                format!(
                    "Recipe {} v{} is deprecated: new experiments cannot start from it; locked ones keep working",
                    recipe.name, recipe.version
                )
            });
        }
        RecipeCommand::Status { dir } => experiments::status(client, &dir, out).await?,
        RecipeCommand::Upgrade { dir } => experiments::upgrade(client, &dir, out).await?,
    }
    Ok(())
}

/// A recipe as `recipe show` prints it.
fn describe(recipe: &Recipe) -> String {
    let mut text = format!(
        "{} v{}{} — {}\nruntime: {}\ncontract: {}\nproject: {}\nobservability: {}{}{}",
        recipe.name,
        recipe.version,
        if recipe.deprecated { " (deprecated)" } else { "" },
        recipe.description.lines().next().unwrap_or_default(),
        recipe.runtime_id,
        recipe.contract,
        recipe.project.as_deref().unwrap_or("(all)"),
        recipe.observability,
        if recipe.hf_token {
            "\njobs get your Hugging Face token (HF_TOKEN)"
        } else {
            ""
        },
        if recipe.user_code {
            "\nruns your code: exp init writes train.sh"
        } else {
            ""
        },
    );
    text.push_str("\n\nKEY                      TYPE     DEFAULT          CONSTRAINT");
    for key in &recipe.keys {
        let default = match &key.default {
            Some(value) => value.to_string(),
            None if key.required => "(required)".into(),
            None => "-".into(),
        };
        text.push_str(&format!(
            "\n{:<24} {:<8} {:<16} {}",
            key.name,
            key.kind,
            default,
            key.constraint.as_deref().unwrap_or_default()
        ));
    }
    if !recipe.rules.is_empty() {
        text.push_str("\n\nrules:");
        for rule in &recipe.rules {
            text.push_str(&format!("\n  {rule}"));
        }
    }
    text
}
