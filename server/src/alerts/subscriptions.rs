//! Subscriptions: which events go to which channel. Who may make one is
//! the API's business (`api/alerts.rs`); this module stores them, lists
//! them and decides, purely, whether one receives an event.

use crate::store::Db;
use crate::store::Error;
use crate::store::ids::new_id;
use crate::store::sql;
use crate::store::time::{now_ms, rfc3339};
use gpuplane_api::alert::{Subscription, SubscriptionScope};
use gpuplane_api::event::{EventKind, Severity};

/// A subscription as matching needs it.
#[derive(Debug, Clone)]
pub struct Rule {
    pub id: String,
    pub channel: String,
    pub project: Option<String>,
    pub user_id: Option<String>,
    pub kinds: Vec<EventKind>,
    pub min_severity: Severity,
    /// For a user's own events: the projects they are still a member of
    /// (None: any, for server admins). People leave: what they were removed
    /// from no longer reaches them.
    pub projects: Option<Vec<String>>,
}

/// What matching needs to know of an event.
#[derive(Debug, Clone)]
pub struct EventFacts<'a> {
    pub kind: EventKind,
    pub severity: Severity,
    /// The project of its job or run; none for node events.
    pub project: Option<&'a str>,
    /// Who submitted its job or created its run.
    pub owner: Option<&'a str>,
}

impl Rule {
    /// Whether this subscription receives the event.
    pub fn receives(&self, event: &EventFacts) -> bool {
        let whose = match (&self.project, &self.user_id) {
            (Some(project), _) => event.project == Some(project.as_str()),
            (None, Some(user_id)) => {
                event.owner == Some(user_id.as_str())
                    && self.projects.as_ref().is_none_or(|projects| {
                        event
                            .project
                            .is_some_and(|project| projects.iter().any(|p| p == project))
                    })
            }
            (None, None) => true,
        };
        whose
            && event.severity >= self.min_severity
            && (self.kinds.is_empty() || self.kinds.contains(&event.kind))
    }
}

#[derive(sqlx::FromRow)]
struct Row {
    id: String,
    channel: String,
    project: Option<String>,
    user_id: Option<String>,
    user_name: Option<String>,
    kinds: String,
    min_severity: String,
    created_at: i64,
    created_by: Option<String>,
}

impl Row {
    fn rule(&self) -> Rule {
        Rule {
            id: self.id.clone(),
            channel: self.channel.clone(),
            project: self.project.clone(),
            user_id: self.user_id.clone(),
            kinds: serde_json::from_str(&self.kinds).unwrap_or_default(),
            min_severity: Severity::parse(&self.min_severity).unwrap_or(Severity::Warning),
            projects: None,
        }
    }

    fn subscription(self) -> Subscription {
        let rule = self.rule();
        Subscription {
            scope: match (&self.project, &self.user_id) {
                (Some(_), _) => SubscriptionScope::Project,
                (None, Some(_)) => SubscriptionScope::User,
                (None, None) => SubscriptionScope::All,
            },
            id: self.id,
            channel: self.channel,
            project: self.project,
            user: self.user_name,
            kinds: rule.kinds,
            min_severity: rule.min_severity,
            created_at: rfc3339(self.created_at),
            created_by: self.created_by,
        }
    }
}

const SELECT: &str = "SELECT s.id, s.channel, s.project, s.user_id, u.name AS user_name, s.kinds,
        s.min_severity, s.created_at, s.created_by
    FROM alert_subscriptions s LEFT JOIN users u ON u.id = s.user_id";

async fn rows(db: &Db) -> Result<Vec<Row>, Error> {
    Ok(sql!(db, |pool| {
        sqlx::query_as(&format!("{SELECT} ORDER BY s.id"))
            .fetch_all(pool)
            .await
    })?)
}

/// The subscriptions in force, as matching needs them: none of a disabled
/// user's (theirs, or made by them), and a user's own ones only for the
/// projects they are still a member of.
pub async fn rules(db: &Db) -> Result<Vec<Rule>, Error> {
    let rows: Vec<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!(
            "{SELECT} WHERE NOT EXISTS (SELECT 1 FROM users d WHERE d.disabled_at IS NOT NULL
                 AND (d.id = s.user_id OR d.name = s.created_by))
             ORDER BY s.id"
        ))
        .fetch_all(pool)
        .await
    })?;
    let memberships: Vec<(String, String, bool)> = sql!(db, |pool| {
        sqlx::query_as(
            "SELECT u.id, coalesce(m.project, ''), u.is_admin FROM users u
             LEFT JOIN project_members m ON m.user_id = u.id
             WHERE u.id IN (SELECT user_id FROM alert_subscriptions WHERE user_id IS NOT NULL)",
        )
        .fetch_all(pool)
        .await
    })?;
    Ok(rows
        .iter()
        .map(|row| {
            let mut rule = row.rule();
            if let Some(user_id) = &rule.user_id {
                let theirs = memberships.iter().filter(|(id, _, _)| id == user_id);
                let admin = memberships.iter().any(|(id, _, admin)| id == user_id && *admin);
                rule.projects = (!admin).then(|| {
                    theirs
                        .filter(|(_, project, _)| !project.is_empty())
                        .map(|(_, project, _)| project.clone())
                        .collect()
                });
            }
            rule
        })
        .collect())
}

/// Every subscription, oldest first, with the rule of each (for the API's
/// visibility checks).
pub async fn list(db: &Db) -> Result<Vec<(Rule, Subscription)>, Error> {
    Ok(rows(db)
        .await?
        .into_iter()
        .map(|row| (row.rule(), row.subscription()))
        .collect())
}

/// One subscription, or 404.
pub async fn get(db: &Db, id: &str) -> Result<(Rule, Subscription), Error> {
    let row: Option<Row> = sql!(db, |pool| {
        sqlx::query_as(&format!("{SELECT} WHERE s.id = $1"))
            .bind(id)
            .fetch_optional(pool)
            .await
    })?;
    let row = row.ok_or_else(|| Error::NotFound(format!("no subscription {id}")))?;
    Ok((row.rule(), row.subscription()))
}

/// Stores a subscription whose caller was allowed to make it.
pub async fn create(db: &Db, rule: &Rule, by: Option<&str>) -> Result<Subscription, Error> {
    let id = new_id("sub");
    let mut kinds = rule.kinds.clone();
    kinds.sort_by_key(|kind| kind.as_str());
    kinds.dedup();
    sql!(db, |pool| {
        sqlx::query(
        "INSERT INTO alert_subscriptions (id, channel, project, user_id, kinds, min_severity, created_at, created_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&id)
    .bind(&rule.channel)
    .bind(&rule.project)
    .bind(&rule.user_id)
    .bind(serde_json::to_string(&kinds).unwrap_or_else(|_| "[]".into()))
    .bind(rule.min_severity.as_str())
    .bind(now_ms())
    .bind(by)
    .execute(pool)
    .await.map(|_| ())
    })?;
    Ok(get(db, &id).await?.1)
}

pub async fn delete(db: &Db, id: &str) -> Result<(), Error> {
    let deleted = sql!(db, |pool| {
        sqlx::query("DELETE FROM alert_subscriptions WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await
            .map(|done| done.rows_affected())
    })?;
    if deleted == 0 {
        return Err(Error::NotFound(format!("no subscription {id}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(project: Option<&str>, user_id: Option<&str>, kinds: &[EventKind], min: Severity) -> Rule {
        Rule {
            id: "sub_1".into(),
            channel: "ops".into(),
            project: project.map(str::to_string),
            user_id: user_id.map(str::to_string),
            kinds: kinds.to_vec(),
            min_severity: min,
            projects: None,
        }
    }

    fn event(
        kind: EventKind,
        severity: Severity,
        project: Option<&'static str>,
        owner: Option<&'static str>,
    ) -> EventFacts<'static> {
        EventFacts {
            kind,
            severity,
            project,
            owner,
        }
    }

    #[test]
    fn a_subscription_receives_its_scope_kinds_and_severities_only() {
        let oom = event(
            EventKind::Oom,
            Severity::Critical,
            Some("vision"),
            Some("usr_ada"),
        );
        let retrying = event(
            EventKind::JobRetrying,
            Severity::Info,
            Some("vision"),
            Some("usr_ada"),
        );
        let disk = event(EventKind::DiskLow, Severity::Warning, None, None);
        let nlp = event(EventKind::Oom, Severity::Critical, Some("nlp"), Some("usr_bob"));

        let project = rule(Some("vision"), None, &[], Severity::Warning);
        assert!(project.receives(&oom));
        assert!(!project.receives(&retrying), "info is below warning");
        assert!(!project.receives(&disk), "node events belong to no project");
        assert!(!project.receives(&nlp));

        let mine = rule(None, Some("usr_ada"), &[EventKind::Oom], Severity::Info);
        assert!(mine.receives(&oom));
        assert!(!mine.receives(&retrying), "not a kind it asked for");
        assert!(!mine.receives(&nlp), "another user's job");

        // Removed from vision, ada no longer hears of her jobs there.
        let removed = Rule {
            projects: Some(vec!["nlp".into()]),
            ..rule(None, Some("usr_ada"), &[], Severity::Info)
        };
        assert!(!removed.receives(&oom));

        let all = rule(None, None, &[], Severity::Info);
        for event in [&oom, &retrying, &disk, &nlp] {
            assert!(all.receives(event));
        }
    }
}
