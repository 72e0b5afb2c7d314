//! Recipes: the catalog (publish, list, show, deprecate) and the jobs of
//! experiments. Parsing a recipe, checking a config and rendering the job
//! are `gpuplane_recipe`'s, shared with `gpuctl`; this module stores the
//! versions, says who sees and publishes them, notices drift, and submits
//! the rendered job with its run's config in one transaction.

pub mod hub;

use crate::identity::access::{self, Caller, Principal, require_server_admin};
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use crate::store::{Db, Error};
use gpuplane_api::error::FieldError;
use gpuplane_api::job::JobSpec;
use gpuplane_api::project::Role;
use gpuplane_api::recipe::{FolderFile, Recipe as RecipeInfo, RecipeSummary, RecipeVersion};
use gpuplane_recipe::Recipe;
use serde_json::{Map, Value};

/// One stored version.
#[derive(sqlx::FromRow)]
pub struct Stored {
    pub name: String,
    pub version: i64,
    pub project: Option<String>,
    pub contract: String,
    pub source: String,
    pub description: String,
    pub runtime_id: String,
    pub deprecated: bool,
    pub published_at: i64,
    pub published_by: Option<String>,
}

impl Stored {
    /// The recipe itself (it parsed when it was published).
    pub fn recipe(&self) -> Result<Recipe, Error> {
        Recipe::parse(&self.source).map_err(|errors| {
            Error::Internal(anyhow::anyhow!(
                "stored recipe {} v{} no longer parses: {errors:?}",
                self.name,
                self.version
            ))
        })
    }

    /// As the API shows it.
    pub fn info(&self) -> Result<RecipeInfo, Error> {
        let recipe = self.recipe()?;
        Ok(RecipeInfo {
            name: self.name.clone(),
            version: self.version,
            project: self.project.clone(),
            runtime_id: self.runtime_id.clone(),
            description: self.description.clone(),
            observability: recipe.observability.as_str().to_string(),
            hf_token: recipe.hf_token,
            user_code: recipe.user_code,
            contract: self.contract.clone(),
            deprecated: self.deprecated,
            published_at: rfc3339(self.published_at),
            published_by: self.published_by.clone(),
            keys: recipe.keys(),
            rules: recipe.rules.iter().map(|rule| rule.describe()).collect(),
            template: Value::Object(recipe.template.clone()),
            schema: recipe.schema.clone(),
            source: self.source.clone(),
        })
    }
}

const COLUMNS: &str = "r.name, r.version, r.project, r.contract, r.source, r.description, r.runtime_id,
    r.deprecated, r.published_at, u.name AS published_by";

/// Every version of `name`, newest first.
async fn versions_of(db: &Db, name: &str) -> Result<Vec<Stored>, Error> {
    let query = format!(
        "SELECT {COLUMNS} FROM recipes r LEFT JOIN users u ON u.id = r.published_by
         WHERE r.name = $1 ORDER BY r.version DESC"
    );
    Ok(sql!(db, |pool| {
        sqlx::query_as(&query).bind(name).fetch_all(pool).await
    })?)
}

/// Whether the principal sees recipes of `project` (none: server-wide, seen
/// by everyone signed in).
async fn sees(db: &Db, principal: &Principal, project: Option<&str>) -> Result<bool, Error> {
    Ok(match project {
        None => true,
        Some(project) => access::role_in(db, principal, project).await?.is_some(),
    })
}

fn not_found(name: &str, version: Option<i64>) -> Error {
    match version {
        Some(version) => Error::NotFound(format!("no recipe {name} v{version} that you can see")),
        None => Error::NotFound(format!("no recipe {name} that you can see")),
    }
}

/// The versions of `name` the principal may see, newest first (404 when none).
pub async fn visible_versions(db: &Db, principal: &Principal, name: &str) -> Result<Vec<Stored>, Error> {
    let versions = versions_of(db, name).await?;
    match versions.first() {
        Some(first) if sees(db, principal, first.project.as_deref()).await? => Ok(versions),
        _ => Err(not_found(name, None)),
    }
}

/// One version the principal may see.
pub async fn visible(db: &Db, principal: &Principal, name: &str, version: i64) -> Result<Stored, Error> {
    visible_versions(db, principal, name)
        .await
        .map_err(|_| not_found(name, Some(version)))?
        .into_iter()
        .find(|stored| stored.version == version)
        .ok_or_else(|| not_found(name, Some(version)))
}

/// The newest version not deprecated, if any.
pub fn latest(versions: &[Stored]) -> Option<&Stored> {
    versions.iter().find(|stored| !stored.deprecated)
}

/// The recipes the principal may see, by name.
pub async fn catalog(db: &Db, principal: &Principal) -> Result<Vec<RecipeSummary>, Error> {
    let query = format!(
        "SELECT {COLUMNS} FROM recipes r LEFT JOIN users u ON u.id = r.published_by
         ORDER BY r.name, r.version DESC"
    );
    let rows: Vec<Stored> = sql!(db, |pool| { sqlx::query_as(&query).fetch_all(pool).await })?;
    let mut summaries: Vec<RecipeSummary> = Vec::new();
    let mut seen_projects: Vec<(Option<String>, bool)> = Vec::new();
    for row in rows {
        let visible = match seen_projects.iter().find(|(project, _)| *project == row.project) {
            Some((_, visible)) => *visible,
            None => {
                let visible = sees(db, principal, row.project.as_deref()).await?;
                seen_projects.push((row.project.clone(), visible));
                visible
            }
        };
        if !visible {
            continue;
        }
        let version = RecipeVersion {
            version: row.version,
            runtime_id: row.runtime_id.clone(),
            contract: row.contract.clone(),
            deprecated: row.deprecated,
            published_at: rfc3339(row.published_at),
        };
        match summaries.last_mut() {
            Some(summary) if summary.name == row.name => {
                if summary.latest.is_none() && !row.deprecated {
                    summary.latest = Some(row.version);
                }
                summary.versions.push(version);
            }
            _ => summaries.push(RecipeSummary {
                name: row.name.clone(),
                project: row.project.clone(),
                description: row.description.clone(),
                latest: (!row.deprecated).then_some(row.version),
                versions: vec![version],
            }),
        }
    }
    Ok(summaries)
}

/// Passes when the caller may publish or deprecate recipes of `project`:
/// server admins for server-wide ones, the project's admins for its own.
pub async fn require_publisher(db: &Db, caller: &Caller, project: Option<&str>) -> Result<(), Error> {
    match project {
        None => require_server_admin(caller, "publishing a server-wide recipe"),
        Some(project) => {
            let principal = caller.principal();
            access::require(db, &principal, project, Role::Admin, || {
                Error::field(
                    "project",
                    format!("no project named `{project}` that you can see"),
                )
            })
            .await?;
            if crate::projects::exists(db, project).await? {
                Ok(())
            } else {
                Err(Error::field("project", format!("no project named `{project}`")))
            }
        }
    }
}

/// What publishing did.
#[derive(Debug, PartialEq, Eq)]
pub enum Published {
    New,
    /// The very same file was published before: nothing changed.
    Again,
}

/// Publishes a checked recipe. A version never changes: the same name and
/// version with other content is a conflict; versions only go up; a name
/// stays with the project (or none) it was first published for.
pub async fn publish(db: &Db, recipe: &Recipe, source: &str, by: Option<&str>) -> Result<Published, Error> {
    let mut tx = crate::store::write(db).await?;
    let existing: Vec<(i64, Option<String>, String)> = sql!(tx, |conn| {
        sqlx::query_as("SELECT version, project, source FROM recipes WHERE name = $1 ORDER BY version DESC")
            .bind(&recipe.name)
            .fetch_all(conn)
            .await
    })?;
    if let Some((_, project, _)) = existing.first()
        && *project != recipe.project
    {
        let owner = project.as_deref().map_or("is server-wide".to_string(), |p| {
            format!("belongs to project {p}")
        });
        return Err(Error::Conflict(format!(
            "recipe {} {owner}: publish its new versions there, or pick another name",
            recipe.name
        )));
    }
    if let Some((_, _, stored)) = existing.iter().find(|(version, _, _)| *version == recipe.version) {
        if stored == source {
            return Ok(Published::Again);
        }
        return Err(Error::Conflict(format!(
            "recipe {} v{} is published with other content, and a published version never changes: publish it as v{}",
            recipe.name,
            recipe.version,
            existing[0].0 + 1
        )));
    }
    if let Some((newest, _, _)) = existing.first()
        && recipe.version < *newest
    {
        return Err(Error::Conflict(format!(
            "recipe {} is at v{newest}: a new version is numbered above it",
            recipe.name
        )));
    }
    let contract = recipe.contract();
    sql!(tx, |conn| {
        sqlx::query(
            "INSERT INTO recipes (name, version, project, contract, source, description, runtime_id, deprecated,
                                  published_at, published_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(&recipe.name)
        .bind(recipe.version)
        .bind(&recipe.project)
        .bind(&contract)
        .bind(source)
        .bind(&recipe.description)
        .bind(&recipe.runtime_id)
        .bind(false)
        .bind(now_ms())
        .bind(by)
        .execute(conn)
        .await
        .map(|_| ())
    })?;
    tx.commit().await?;
    Ok(Published::New)
}

/// Hides a version from new experiments; locks on it keep working.
pub async fn deprecate(db: &Db, name: &str, version: i64) -> Result<(), Error> {
    sql!(db, |pool| {
        sqlx::query("UPDATE recipes SET deprecated = $1 WHERE name = $2 AND version = $3")
            .bind(true)
            .bind(name)
            .bind(version)
            .execute(pool)
            .await
            .map(|_| ())
    })?;
    Ok(())
}

/// Why an experiment's lock no longer matches the catalog, in words that
/// name both versions; none when it matches.
pub fn drift(versions: &[Stored], locked: &Stored, contract: &str) -> Option<String> {
    if let Some(newest) = latest(versions)
        && newest.version > locked.version
    {
        return Some(format!(
            "the experiment is locked to recipe {} v{} and the catalog's newest is v{}: \
             see what changed with `gpuctl recipe status DIR`, then `gpuctl recipe upgrade DIR` \
             (or submit with --upgrade-recipe)",
            locked.name, locked.version, newest.version
        ));
    }
    (locked.contract != contract).then(|| {
        format!(
            "the experiment's lock has contract {contract} but recipe {} v{} in the catalog has {}: \
             the lock was not made from this catalog; run `gpuctl recipe upgrade DIR`",
            locked.name, locked.version, locked.contract
        )
    })
}

/// The run config an experiment's job records: the config the job runs
/// with, and which recipe it came from (`recipe.name`, `recipe.version`,
/// `recipe.contract`), so runs filter and compare by them.
pub fn run_config(recipe: &Recipe, config: &Map<String, Value>) -> std::collections::BTreeMap<String, Value> {
    let mut recorded: std::collections::BTreeMap<String, Value> =
        config.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    recorded.insert("recipe.name".into(), Value::from(recipe.name.clone()));
    recorded.insert("recipe.version".into(), Value::from(recipe.version));
    recorded.insert("recipe.contract".into(), Value::from(recipe.contract()));
    recorded
}

/// Queues an experiment's job with its run's config and the folder shipped
/// with it (checked by `check_folder`), in one transaction.
pub async fn submit(
    db: &Db,
    secret: &crate::identity::secrets::SecretKey,
    spec: &JobSpec,
    config: &std::collections::BTreeMap<String, Value>,
    folder: &[FolderFile],
    principal: &Principal,
) -> Result<String, Error> {
    crate::jobs::store::check_references(db, spec, principal).await?;
    let mut tx = crate::store::write(db).await?;
    let job_id = crate::jobs::store::insert(&mut tx, secret, spec, principal.user_id.as_deref()).await?;
    let run_id = crate::jobs::store::run_of(&mut tx, &job_id).await?;
    crate::runs::details::update_config(&mut tx, &run_id, config).await?;
    crate::jobs::store::insert_folder(&mut tx, &job_id, folder).await?;
    tx.commit().await?;
    Ok(job_id)
}

/// The Hub precheck of a checked config: a refusal per key whose repo the
/// user cannot read, and a warning per key the Hub did not answer for.
pub async fn precheck(
    hub: &hub::Hub,
    recipe: &Recipe,
    config: &Map<String, Value>,
    token: Option<&str>,
) -> (Vec<FieldError>, Vec<String>) {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let whose = if token.is_some() {
        "your linked Hub token cannot read it"
    } else {
        "you have linked no Hub token (`gpuctl hf link`)"
    };
    for (key, kind) in recipe.hub_keys() {
        let Some(Value::String(id)) = config.get(&key) else {
            continue;
        };
        let field = format!("config.{key}");
        match hub.check(&kind, id, token).await {
            None | Some(hub::Verdict::Readable) => {}
            Some(hub::Verdict::Unknown) => errors.push(FieldError {
                field,
                message: format!(
                    "no {kind} `{id}` on the Hub ({}), or it is private and {whose}: check the name",
                    hub.page(&kind, id)
                ),
            }),
            Some(hub::Verdict::Gated) => errors.push(FieldError {
                field,
                message: format!(
                    "{kind} `{id}` is gated and {whose}: request access on {}, then link a token of an \
                     account that has it (`gpuctl hf link`, or the console's Hugging Face page)",
                    hub.page(&kind, id)
                ),
            }),
            Some(hub::Verdict::Unanswered(why)) => {
                warnings.push(format!("{key} `{id}` was not checked against the Hub: {why}"))
            }
        }
    }
    (errors, warnings)
}
