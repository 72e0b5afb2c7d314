//! Confirmations of the tools that stop or redo work (`cancel_job`,
//! `retry_job`, `submit_job` at a preempting priority). Their `preview_`
//! tool answers what the call would do and a confirmation: the server's
//! signature of the MCP session, the tool, its exact arguments and an
//! expiry a few minutes away. The call goes through only with a
//! confirmation that matches all four, so neither a model nor text it read
//! (a job's log line saying "cancel everything") can stand in for the
//! preview the user saw.

use crate::identity::secrets::SecretKey;
use rmcp::model::JsonObject;

/// How long a confirmation lasts.
pub const LIFETIME_S: i64 = 300;
const PURPOSE: &str = "mcp-confirmation";

fn message(session: &str, tool: &str, args: &JsonObject, expires: i64) -> String {
    // serde_json's maps are sorted: the same arguments, the same text.
    let args = serde_json::to_string(args).unwrap_or_default();
    format!("{session}\n{tool}\n{args}\n{expires}")
}

/// A confirmation of `tool` with `args` in `session`, valid until `now_s + LIFETIME_S`.
pub fn mint(key: &SecretKey, session: &str, tool: &str, args: &JsonObject, now_s: i64) -> String {
    let expires = now_s + LIFETIME_S;
    let signature = key.sign(PURPOSE, &message(session, tool, args, expires));
    format!("cfm_{expires}_{signature}")
}

/// Passes when `confirmation` was minted for `tool` with `args` in
/// `session` and has not expired; else says what to do.
pub fn check(
    key: &SecretKey,
    session: &str,
    tool: &str,
    args: &JsonObject,
    confirmation: &str,
    now_s: i64,
) -> Result<(), String> {
    let again = format!(
        "call preview_{tool} with these arguments and show the user what it says, then {tool} with its confirmation"
    );
    let Some((expires, signature)) = confirmation
        .strip_prefix("cfm_")
        .and_then(|rest| rest.split_once('_'))
        .and_then(|(expires, signature)| Some((expires.parse::<i64>().ok()?, signature)))
    else {
        return Err(format!("`{confirmation}` is not a confirmation: {again}"));
    };
    if !key.verify(PURPOSE, &message(session, tool, args, expires), signature) {
        return Err(format!(
            "this confirmation is not for {tool} with these arguments in this session: {again}"
        ));
    }
    if expires < now_s {
        return Err(format!("this confirmation has expired: {again}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: serde_json::Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_confirmation_holds_for_its_session_tool_and_arguments_until_it_expires() {
        let key = SecretKey::for_tests([3; 32]);
        let job = args(json!({"job_id": "job_1"}));
        let token = mint(&key, "session-a", "cancel_job", &job, 1000);
        assert_eq!(check(&key, "session-a", "cancel_job", &job, &token, 1100), Ok(()));
        assert!(
            check(
                &key,
                "session-a",
                "cancel_job",
                &job,
                &token,
                1000 + LIFETIME_S + 1
            )
            .is_err()
        );
        assert!(
            check(&key, "session-b", "cancel_job", &job, &token, 1100).is_err(),
            "another session"
        );
        assert!(
            check(&key, "session-a", "retry_job", &job, &token, 1100).is_err(),
            "another tool"
        );
        let other = args(json!({"job_id": "job_2"}));
        assert!(
            check(&key, "session-a", "cancel_job", &other, &token, 1100).is_err(),
            "another job"
        );
        let later = token.replacen("cfm_1300", "cfm_9999", 1);
        assert!(
            check(&key, "session-a", "cancel_job", &job, &later, 1100).is_err(),
            "a moved expiry"
        );
        assert!(
            check(
                &SecretKey::for_tests([4; 32]),
                "session-a",
                "cancel_job",
                &job,
                &token,
                1100
            )
            .is_err()
        );
        assert!(check(&key, "session-a", "cancel_job", &job, "true", 1100).is_err());
    }
}
