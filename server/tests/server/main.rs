//! The server's integration tests, in one binary so the server is linked
//! once: a real server on a free port over a real SQLite file, spoken to
//! over HTTP (and the real `gpuplane-server` binary in `binary`).

mod access;
mod alerts;
mod api;
mod arrays;
mod audit;
mod binary;
mod charts;
mod device;
mod experiments;
mod hub;
mod job_spec_reference;
mod leaders;
mod metric_storage;
mod metrics;
mod mlflow;
mod multi_node;
mod nodes;
mod project_rights;
mod prometheus;
mod recipes;
mod schema;
mod security;
mod sessions;
mod shares;
mod sweep_pruner;
mod sweeps;
mod users;

/// Who attacks a project's things in these tests: projects `vision` and
/// `speech`, a server admin, a viewer of vision, an editor of speech only
/// (`outsider`) and an editor of vision whose token is limited to speech.
#[derive(Clone)]
pub struct People {
    pub admin: String,
    pub viewer: String,
    pub outsider: String,
    pub limited: String,
}

impl People {
    /// Each of them but the admin, and `sdk` (a job's own token), asks to
    /// cancel at `path`: the viewer and the sdk token get 403, the others
    /// 404, as if it did not exist.
    pub async fn cannot_cancel(&self, f: &gpuplane_testkit::TestServer, path: &str, sdk: &str) {
        use reqwest::StatusCode;
        for (token, expected) in [
            (&self.viewer, StatusCode::FORBIDDEN),
            (&self.outsider, StatusCode::NOT_FOUND),
            (&self.limited, StatusCode::NOT_FOUND),
            (&sdk.to_string(), StatusCode::FORBIDDEN),
        ] {
            let (status, body) = f.post(path, token, serde_json::json!({"confirm": true})).await;
            assert_eq!(status, expected, "{path}: {body}");
        }
    }

    pub async fn of_vision(f: &gpuplane_testkit::TestServer) -> People {
        use gpuplane_api::auth::Scope;
        use gpuplane_server::identity::credentials::hash_token;
        use gpuplane_testkit::user_token;
        use reqwest::StatusCode;
        use serde_json::json;
        let db = &f.server.state.db;
        let admin = user_token(db, "ada", Scope::Write, true).await;
        for project in ["vision", "speech"] {
            let (status, body) = f.post("/projects", &admin, json!({"name": project})).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
        let viewer = user_token(db, "val", Scope::Write, false).await;
        let outsider = user_token(db, "otto", Scope::Write, false).await;
        let limited = user_token(db, "lim", Scope::Write, false).await;
        for (user, project, role) in [
            ("val", "vision", "viewer"),
            ("otto", "speech", "editor"),
            ("lim", "vision", "editor"),
        ] {
            let (status, body) = f
                .post(
                    &format!("/projects/{project}/members"),
                    &admin,
                    json!({"user": user, "role": role}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        // lim's token is limited to `speech`, where lim is no member.
        gpuplane_testkit::sql!(db, |pool| {
            sqlx::query("UPDATE api_tokens SET project = 'speech' WHERE token_hash = $1")
                .bind(hash_token(&limited))
                .execute(pool)
                .await
                .map(|_| ())
        })
        .unwrap();
        People {
            admin,
            viewer,
            outsider,
            limited,
        }
    }
}
