//! Failure explanations and run diagnoses. The rules are data
//! (`rules.toml`, tried in order); this module gathers a run's facts —
//! failure reason and detail, exit, output lines, events, the first
//! non-finite loss — and applies them. Unknown failures still get the exit
//! code's meaning and the last error-looking lines.

use gpuplane_api::diagnosis::{Evidence, FailureExplanation};
use gpuplane_api::event::Event;
use gpuplane_api::job::{FailureReason, signal_name};
use gpuplane_api::log::{LogLine, looks_like_error};
use gpuplane_api::metric::Value;
use regex::Regex;
use serde::Deserialize;
use std::sync::LazyLock;

pub mod facts;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    id: String,
    category: String,
    summary: String,
    likely_causes: Vec<String>,
    actions: Vec<String>,
    retry_advice: String,
    #[serde(default)]
    reasons: Vec<String>,
    #[serde(default)]
    detail: Vec<String>,
    #[serde(default)]
    signals: Vec<i32>,
    #[serde(default)]
    log: Vec<String>,
    #[serde(default)]
    events: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    rule: Vec<Rule>,
}

struct Compiled {
    rule: Rule,
    detail: Vec<Regex>,
    log: Vec<Regex>,
}

fn compile(text: &str) -> Result<Vec<Compiled>, String> {
    let file: RuleFile = toml::from_str(text).map_err(|e| e.to_string())?;
    file.rule
        .into_iter()
        .map(|rule| {
            let regexes = |patterns: &[String]| -> Result<Vec<Regex>, String> {
                patterns
                    .iter()
                    .map(|p| Regex::new(p).map_err(|e| format!("rule {}: {e}", rule.id)))
                    .collect()
            };
            Ok(Compiled {
                detail: regexes(&rule.detail)?,
                log: regexes(&rule.log)?,
                rule,
            })
        })
        .collect()
}

/// The rules shipped with the server (a test checks they compile).
static RULES: LazyLock<Vec<Compiled>> =
    LazyLock::new(|| compile(include_str!("rules.toml")).expect("server/src/diagnosis/rules.toml is valid"));

/// What is known about a failed run.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub status: String,
    pub failure_reason: Option<FailureReason>,
    pub detail: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Kept output lines of the failed attempt, oldest first.
    pub lines: Vec<LogLine>,
    pub events: Vec<Event>,
    /// The first non-finite value of a loss-like key: (key, step, value).
    pub first_bad: Option<(String, i64, f64)>,
}

/// Explains a failure with the first rule that matches, or the fallback.
pub fn explain(run_id: &str, job_id: Option<&str>, facts: &Facts) -> FailureExplanation {
    for compiled in RULES.iter() {
        if let Some(matched) = matches(compiled, facts) {
            return render(run_id, job_id, facts, &compiled.rule, matched);
        }
    }
    fallback(run_id, job_id, facts)
}

/// The evidence for a rule when all its conditions hold.
fn matches(compiled: &Compiled, facts: &Facts) -> Option<Vec<Evidence>> {
    let rule = &compiled.rule;
    let mut evidence = Vec::new();
    if !rule.reasons.is_empty() {
        let reason = facts.failure_reason?;
        if !rule.reasons.iter().any(|r| r == reason.as_str()) {
            return None;
        }
    }
    if !compiled.detail.is_empty() {
        let detail = facts.detail.as_deref()?;
        if !compiled.detail.iter().any(|re| re.is_match(detail)) {
            return None;
        }
    }
    if !rule.signals.is_empty() && !facts.signal.is_some_and(|s| rule.signals.contains(&s)) {
        return None;
    }
    if !compiled.log.is_empty() {
        let hits: Vec<&LogLine> = facts
            .lines
            .iter()
            .filter(|line| compiled.log.iter().any(|re| re.is_match(&line.text)))
            .collect();
        if hits.is_empty() {
            return None;
        }
        evidence.extend(hits.into_iter().take(5).map(log_evidence));
    }
    if !rule.events.is_empty() {
        let hits: Vec<&Event> = facts
            .events
            .iter()
            .filter(|e| rule.events.iter().any(|k| k == e.kind.as_str()))
            .collect();
        if hits.is_empty() {
            return None;
        }
        evidence.extend(hits.into_iter().take(3).map(event_evidence));
        if let Some((key, step, value)) = &facts.first_bad {
            evidence.push(Evidence::Metric {
                key: key.clone(),
                step: *step,
                value: Value(*value),
            });
        }
    }
    if let Some(detail) = &facts.detail {
        evidence.push(Evidence::Job { text: detail.clone() });
    }
    Some(evidence)
}

/// A matching output line; a multi-node job's line says whose it is.
fn log_evidence(line: &LogLine) -> Evidence {
    let text = match line.rank {
        0 => line.text.clone(),
        rank => format!("[rank {rank}] {}", line.text),
    };
    Evidence::Log {
        attempt: line.attempt,
        stream: line.stream,
        n: line.n,
        text,
    }
}

fn event_evidence(event: &Event) -> Evidence {
    Evidence::Event {
        time: event.time.clone(),
        event_kind: event.kind.as_str().to_string(),
        message: event.message.clone(),
    }
}

fn render(
    run_id: &str,
    job_id: Option<&str>,
    facts: &Facts,
    rule: &Rule,
    evidence: Vec<Evidence>,
) -> FailureExplanation {
    let matched = evidence
        .iter()
        .find_map(|e| match e {
            Evidence::Log { text, .. } => Some(text.trim().to_string()),
            _ => None,
        })
        .or_else(|| {
            evidence.iter().find_map(|e| match e {
                Evidence::Event { message, .. } => Some(message.clone()),
                _ => None,
            })
        })
        .unwrap_or_default();
    let fill = |text: &str| fill(text, facts, &matched);
    FailureExplanation {
        run_id: run_id.to_string(),
        job_id: job_id.map(str::to_string),
        status: facts.status.clone(),
        failure_reason: facts.failure_reason.map(|r| r.as_str().to_string()),
        rule: rule.id.clone(),
        category: rule.category.clone(),
        summary: fill(&rule.summary),
        evidence,
        likely_causes: rule.likely_causes.iter().map(|t| fill(t)).collect(),
        actions: rule.actions.iter().map(|t| fill(t)).collect(),
        retry_advice: fill(&rule.retry_advice),
    }
}

fn fill(text: &str, facts: &Facts, matched: &str) -> String {
    let (bad_key, bad_step, bad_value) = match &facts.first_bad {
        Some((key, step, value)) => (key.clone(), step.to_string(), Value(*value).describe()),
        None => ("the loss".into(), "?".into(), "non-finite".into()),
    };
    text.replace(
        "{exit_code}",
        &facts.exit_code.map_or("?".into(), |c| c.to_string()),
    )
    .replace(
        "{signal_name}",
        facts.signal.and_then(signal_name).unwrap_or("a signal"),
    )
    .replace("{signal}", &facts.signal.map_or("?".into(), |s| s.to_string()))
    .replace(
        "{detail}",
        facts
            .detail
            .as_deref()
            .unwrap_or("no detail")
            .trim_end_matches('.'),
    )
    .replace("{first_bad_step}", &bad_step)
    .replace("{bad_key}", &bad_key)
    .replace("{bad_value}", &bad_value)
    .replace("{matched}", matched)
}

/// What an exit code usually means.
pub fn exit_code_meaning(code: i32) -> &'static str {
    match code {
        1 => "a general error (an uncaught exception in Python)",
        2 => "a usage error (wrong command-line arguments)",
        126 => "the program was found but could not be executed",
        127 => "a command was not found (often inside a shell script)",
        130 => "interrupted (SIGINT, Ctrl-C)",
        134 => "aborted (SIGABRT, 128+6): a library gave up, see its message",
        137 => "killed (SIGKILL, 128+9): often the OOM killer or a memory limit",
        139 => "a segmentation fault (SIGSEGV, 128+11)",
        143 => "terminated (SIGTERM, 128+15)",
        _ => "a failure reported by the program itself",
    }
}

fn fallback(run_id: &str, job_id: Option<&str>, facts: &Facts) -> FailureExplanation {
    let error_lines: Vec<&LogLine> = facts.lines.iter().filter(|l| looks_like_error(&l.text)).collect();
    let shown: Vec<&LogLine> = if error_lines.is_empty() {
        facts.lines.iter().rev().take(5).rev().collect()
    } else {
        error_lines.iter().rev().take(5).rev().copied().collect()
    };
    let summary = match (facts.exit_code, facts.signal) {
        (Some(code), _) => format!(
            "The process exited with code {code}: {}.",
            exit_code_meaning(code)
        ),
        (None, Some(signal)) => format!(
            "The process was killed by {} (signal {signal}).",
            signal_name(signal).unwrap_or("a signal")
        ),
        _ => format!(
            "The job ended {}.",
            facts.detail.as_deref().unwrap_or("without a reason on record")
        ),
    };
    let mut evidence: Vec<Evidence> = shown.into_iter().map(log_evidence).collect();
    if let Some(detail) = &facts.detail {
        evidence.push(Evidence::Job { text: detail.clone() });
    }
    FailureExplanation {
        run_id: run_id.to_string(),
        job_id: job_id.map(str::to_string),
        status: facts.status.clone(),
        failure_reason: facts.failure_reason.map(|r| r.as_str().to_string()),
        rule: "unknown".into(),
        category: "unrecognised failure".into(),
        summary,
        evidence,
        likely_causes: vec!["no known pattern matched: the last error-looking lines below are the best lead".into()],
        actions: vec![
            "read the lines below, then the whole stderr: gpuctl logs <job-id> --stream stderr -n 0".into(),
            "fix the cause in the code or data, then retry with the changes (gpuctl job retry <job-id> --set ...)".into(),
        ],
        retry_advice: "Retrying unchanged usually fails the same way, unless the cause was outside the job.".into(),
    }
}

#[cfg(test)]
mod tests;
