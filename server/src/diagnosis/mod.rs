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

fn log_evidence(line: &LogLine) -> Evidence {
    Evidence::Log {
        attempt: line.attempt,
        stream: line.stream,
        n: line.n,
        text: line.text.clone(),
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
mod tests {
    use super::*;
    use expect_test::{Expect, expect};
    use gpuplane_api::event::{EventKind, Severity};
    use gpuplane_api::log::LogStream;

    fn lines(stderr: &str) -> Vec<LogLine> {
        stderr
            .lines()
            .enumerate()
            .map(|(i, text)| LogLine {
                n: i as i64 + 1,
                stream: LogStream::Stderr,
                text: text.to_string(),
                attempt: 1,
                time: "2026-11-30T00:00:00.000Z".into(),
                rank: 0,
            })
            .collect()
    }

    fn facts(reason: FailureReason, detail: &str, stderr: &str) -> Facts {
        Facts {
            status: "FAILED".into(),
            failure_reason: Some(reason),
            detail: Some(detail.into()),
            exit_code: Some(1),
            lines: lines(stderr),
            ..Facts::default()
        }
    }

    /// The rule id, category, summary and first action, as one snapshot.
    fn check(facts: Facts, expected: Expect) {
        let explanation = explain("run_x", Some("job_x"), &facts);
        let log_evidence = explanation
            .evidence
            .iter()
            .filter_map(|e| match e {
                Evidence::Log { n, text, .. } => Some(format!("  line {n}: {text}\n")),
                _ => None,
            })
            .collect::<String>();
        expected.assert_eq(&format!(
            "{} | {}\n{}\n{}first action: {}\nretry: {}\n",
            explanation.rule,
            explanation.category,
            explanation.summary,
            log_evidence,
            explanation.actions[0],
            explanation.retry_advice
        ));
    }

    #[test]
    fn the_shipped_rules_compile() {
        assert!(RULES.len() >= 15);
        assert!(
            compile("[[rule]]\nid = \"x\"\n").is_err(),
            "missing fields are refused"
        );
    }

    #[test]
    fn cuda_out_of_memory() {
        check(
            facts(
                FailureReason::Oom,
                "CUDA out of memory: torch.OutOfMemoryError: CUDA out of memory.",
                "Epoch 3:  41%|████      | 1201/2930 [12:01<17:18,  1.66it/s]\nTraceback (most recent call last):\n  File \"train.py\", line 88, in <module>\n    loss.backward()\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
            ),
            expect![[r#"
                cuda-oom | CUDA out of memory
                The GPU ran out of memory: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.
                  line 5: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.
                first action: lower the batch size (keep the effective batch with gradient accumulation)
                retry: Retrying unchanged will fail the same way; lower the batch size or enable gradient checkpointing, then retry with --set (e.g. --set env.BATCH_SIZE=16).
            "#]],
        );
    }

    #[test]
    fn host_oom_kill() {
        let mut facts = facts(
            FailureReason::Oom,
            "killed by the kernel's OOM killer (host memory ran out)",
            "loading shard 412/1024",
        );
        facts.signal = Some(9);
        facts.exit_code = None;
        check(
            facts,
            expect![[r#"
                host-oom | host out of memory (OOM killer)
                The kernel's OOM killer stopped the job: host memory ran out.
                first action: reduce DataLoader num_workers and prefetching; stream the dataset instead of loading it whole
                retry: Retrying unchanged will likely fail the same way; reduce host memory use first.
            "#]],
        );
    }

    #[test]
    fn a_gpu_error_event_explains_the_failure_before_the_log_lines_do() {
        let mut facts = facts(
            FailureReason::ExitCode,
            "exited with code 1",
            "RuntimeError: CUDA error: unspecified launch failure",
        );
        facts.events = vec![Event {
            id: "evt_1".into(),
            time: "2026-11-30T00:00:00.000Z".into(),
            severity: Severity::Critical,
            kind: EventKind::GpuError,
            job_id: None,
            run_id: None,
            node_id: None,
            message: "GPU 0 on box reported Xid 79 (the GPU has fallen off the bus: hardware, power or a PCIe fault)"
                .into(),
        }];
        check(
            facts,
            expect![[r#"
                gpu-hardware-error | GPU hardware error (Xid / ECC)
                The job's GPU reported a hardware error: GPU 0 on box reported Xid 79 (the GPU has fallen off the bus: hardware, power or a PCIe fault)
                first action: on the host: nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER and sudo dmesg | grep -i xid
                retry: A hardware error may pass on another node; the same GPU may fail again until it is checked.
            "#]],
        );
    }

    #[test]
    fn nan_loss_names_the_first_bad_step() {
        let mut facts = facts(
            FailureReason::ExitCode,
            "exited with code 1",
            "step 4200 loss nan\nRuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
        );
        facts.events = vec![Event {
            id: "evt_1".into(),
            time: "2026-11-30T00:00:00.000Z".into(),
            severity: Severity::Critical,
            kind: EventKind::LossNan,
            job_id: None,
            run_id: None,
            node_id: None,
            message: "train/loss became NaN at step 4200".into(),
        }];
        facts.first_bad = Some(("train/loss".into(), 4200, f64::NAN));
        check(
            facts,
            expect![[r#"
                nan-loss | NaN/Inf loss
                train/loss became NaN at step 4200, and the job failed.
                first action: lower the learning rate (or lengthen warm-up) and clip gradients (e.g. max_norm=1.0)
                retry: Retrying unchanged will diverge again at about the same step; change the learning rate or precision first.
            "#]],
        );
    }

    #[test]
    fn segfault() {
        let mut facts = facts(
            FailureReason::Signal,
            "killed by SIGSEGV (signal 11)",
            "Fatal Python error: Segmentation fault\n\nThread 0x00007f (most recent call first):\n  File \"/opt/conda/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py\", line 308 in _worker_loop",
        );
        facts.signal = Some(11);
        facts.exit_code = None;
        check(
            facts,
            expect![[r#"
                segfault | segmentation fault
                The process crashed with SIGSEGV (a segmentation fault).
                first action: look at the last lines before the crash for the failing library
                retry: Deterministic crashes fail the same way; rare ones may pass on retry.
            "#]],
        );
    }

    #[test]
    fn other_signals() {
        let mut facts = facts(FailureReason::Signal, "killed by SIGKILL (signal 9)", "");
        facts.signal = Some(9);
        check(
            facts,
            expect![[r#"
                signal | killed by a signal
                The process was killed by SIGKILL (signal 9).
                first action: look at the last lines of stderr for the reason
                retry: If nothing in the job caused it, retrying is reasonable.
            "#]],
        );
    }

    #[test]
    fn nccl_timeout() {
        check(
            facts(
                FailureReason::ExitCode,
                "exited with code 1",
                "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213, OpType=ALLREDUCE, NumelIn=262668288) ran for 600049 milliseconds before timing out.\n[rank3]: Some NCCL operations have failed or timed out.",
            ),
            expect![[r#"
                nccl-timeout | NCCL / distributed timeout
                A distributed collective timed out or failed: [rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213, OpType=ALLREDUCE, NumelIn=262668288) ran for 600049 milliseconds before timing out.
                  line 1: [rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48213, OpType=ALLREDUCE, NumelIn=262668288) ran for 600049 milliseconds before timing out.
                first action: find the first rank that failed in its own log; that is the real error
                retry: A transient network fault may pass on retry; a rank bug or a bad link will fail again.
            "#]],
        );
    }

    #[test]
    fn cuda_device_errors() {
        check(
            facts(
                FailureReason::ExitCode,
                "exited with code 1",
                "../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [5,0,0] Assertion `t >= 0 && t < n_classes` failed.\nRuntimeError: CUDA error: device-side assert triggered",
            ),
            expect![[r#"
                cuda-device-error | CUDA driver or device error
                The GPU or its driver reported an error: RuntimeError: CUDA error: device-side assert triggered
                  line 2: RuntimeError: CUDA error: device-side assert triggered
                first action: for device-side asserts: rerun with CUDA_LAUNCH_BLOCKING=1 to find the op; check label ranges
                retry: Code errors (asserts) fail the same way on retry; hardware errors may pass on another node.
            "#]],
        );
        let xid = facts(
            FailureReason::ExitCode,
            "exited with code 1",
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=2193, GPU has fallen off the bus.",
        );
        assert_eq!(explain("r", None, &xid).rule, "cuda-device-error");
    }

    #[test]
    fn python_import_and_missing_files() {
        check(
            facts(
                FailureReason::ExitCode,
                "exited with code 1",
                "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    import transformers\nModuleNotFoundError: No module named 'transformers'",
            ),
            expect![[r#"
                python-import | Python import error
                A Python module could not be imported: ModuleNotFoundError: No module named 'transformers'
                  line 4: ModuleNotFoundError: No module named 'transformers'
                first action: run the job with the full path of the right interpreter (e.g. /opt/envs/train/bin/python)
                retry: Retrying unchanged fails the same way; fix the environment first.
            "#]],
        );
        let missing = facts(
            FailureReason::ExitCode,
            "exited with code 1",
            "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'",
        );
        assert_eq!(explain("r", None, &missing).rule, "missing-file");
    }

    #[test]
    fn dispatch_failures() {
        check(
            facts(
                FailureReason::DispatchFailed,
                "working_dir /home/ana/exp does not exist on gpu-7 (paths are the agent host's, never the submitter's)",
                "",
            ),
            expect![[r#"
                dispatch-working-dir | dispatch failure: working_dir
                The job never started: working_dir /home/ana/exp does not exist on gpu-7 (paths are the agent host's, never the submitter's).
                first action: check the path on the agent host: ssh <host> ls -d <working_dir>
                retry: Retrying unchanged fails the same way; retry with --set working_dir=/path/on/the/agent/host.
            "#]],
        );
        let command = facts(
            FailureReason::DispatchFailed,
            "command[0] `pyhton` was not found on this host's PATH (/usr/bin:/bin)",
            "",
        );
        assert_eq!(explain("r", None, &command).rule, "dispatch-command");
        let docker = facts(
            FailureReason::DispatchFailed,
            "runner docker: image nvcr.io/nvidia/pytorch:24.05-py3 is not on gpu-7",
            "",
        );
        assert_eq!(explain("r", None, &docker).rule, "dispatch-docker");
    }

    #[test]
    fn disk_full() {
        check(
            facts(
                FailureReason::ExitCode,
                "exited with code 1",
                "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1536 vs 1430\nOSError: [Errno 28] No space left on device",
            ),
            expect![[r#"
                disk-full | disk full
                The disk filled up: OSError: [Errno 28] No space left on device
                  line 2: OSError: [Errno 28] No space left on device
                first action: df -h <working_dir> on the agent host
                retry: Retrying fails the same way until space is freed.
            "#]],
        );
    }

    #[test]
    fn a_failure_while_the_disk_was_nearly_full() {
        let mut facts = facts(
            FailureReason::ExitCode,
            "exited with code 1",
            "saving checkpoint to ckpt/step_9000.pt\nRuntimeError: PytorchStreamWriter failed writing file data/27: file write failed",
        );
        facts.events = vec![Event {
            id: "evt_2".into(),
            time: "2026-11-30T00:00:00.000Z".into(),
            severity: Severity::Warning,
            kind: EventKind::DiskLow,
            job_id: None,
            run_id: None,
            node_id: None,
            message: "/data has 2.1% free (4.2 GiB of 200 GiB)".into(),
        }];
        check(
            facts,
            expect![[r#"
                disk-low-event | disk full
                The job failed while its disk was nearly full.
                first action: df -h <working_dir> on the agent host; delete old checkpoints or move outputs
                retry: Free space first; then retrying is reasonable.
            "#]],
        );
    }

    /// Rules are added to rules.toml with a test here: each id must appear below.
    #[test]
    fn every_rule_has_a_test() {
        let source = include_str!("mod.rs");
        let tests = &source[source.find("mod tests").unwrap()..];
        for compiled in RULES.iter() {
            let id = &compiled.rule.id;
            assert!(
                tests.contains(&format!("{id} |")) || tests.contains(&format!("\"{id}\"")),
                "rule {id} has no test with a log excerpt"
            );
        }
    }

    #[test]
    fn job_lost_and_invalid_evaluations() {
        let lost = facts(
            FailureReason::JobLost,
            "node gpu-3 has not answered since 2026-11-30T01:00:00.000Z",
            "",
        );
        assert_eq!(explain("r", None, &lost).rule, "job-lost");
        let eval = facts(
            FailureReason::EvaluationResultInvalid,
            "metrics.accuracy is \"high\", not a number",
            "",
        );
        let explanation = explain("r", None, &eval);
        assert_eq!(explanation.rule, "evaluation-invalid");
        assert_eq!(
            explanation.summary,
            "The evaluation exited 0 but its result was not usable: metrics.accuracy is \"high\", not a number."
        );
    }

    #[test]
    fn a_job_whose_dependency_failed() {
        let failed = facts(
            FailureReason::DependencyFailed,
            "job_01A ended FAILED, and this job runs only after it succeeds",
            "",
        );
        let explanation = explain("r", None, &failed);
        assert_eq!(explanation.rule, "dependency-failed");
        assert_eq!(
            explanation.summary,
            "The job never started: job_01A ended FAILED, and this job runs only after it succeeds."
        );
    }

    #[test]
    fn a_job_stopped_at_its_time_limit() {
        let timeout = facts(
            FailureReason::Timeout,
            "reached its time limit of 2h: it was stopped with SIGTERM and ended by SIGTERM",
            "epoch 7 step 41000 loss 0.31",
        );
        let explanation = explain("r", None, &timeout);
        assert_eq!(explanation.rule, "time-limit");
        assert_eq!(
            explanation.summary,
            "The job ran until its time limit and was stopped: reached its time limit of 2h: it was stopped with SIGTERM and ended by SIGTERM."
        );
        assert!(explanation.retry_advice.contains("raise time_limit_s"));
        // A job that hung on a prompt until its limit is explained by the prompt.
        let prompt = facts(FailureReason::Timeout, "reached its time limit of 1h", "(Pdb) ");
        assert_eq!(explain("r", None, &prompt).rule, "interactive-prompt");
    }

    #[test]
    fn a_job_waiting_for_input() {
        check(
            facts(
                FailureReason::ExitCode,
                "exited with code 1",
                "Overwrite existing checkpoint? [y/N] Traceback (most recent call last):\n  File \"train.py\", line 12, in <module>\n    answer = input(\"Overwrite existing checkpoint? [y/N] \")\nEOFError: EOF when reading a line",
            ),
            expect![[r#"
                interactive-prompt | hanging on an interactive prompt
                The job waited for keyboard input, which jobs never get (stdin is /dev/null): EOFError: EOF when reading a line
                  line 4: EOFError: EOF when reading a line
                first action: remove breakpoint()/pdb calls and --pdb/-i flags; pass answers as arguments or environment variables
                retry: Retrying unchanged fails the same way; make the command non-interactive first.
            "#]],
        );
    }

    #[test]
    fn unknown_failures_get_the_exit_code_and_the_last_error_lines() {
        let mut facts = facts(
            FailureReason::ExitCode,
            "exited with code 3",
            "epoch 1 done\nvalidation failed: expected 10 classes, got 12\nsaving state\ncleanup error: lock held",
        );
        facts.exit_code = Some(3);
        check(
            facts,
            expect![[r#"
                unknown | unrecognised failure
                The process exited with code 3: a failure reported by the program itself.
                  line 2: validation failed: expected 10 classes, got 12
                  line 4: cleanup error: lock held
                first action: read the lines below, then the whole stderr: gpuctl logs <job-id> --stream stderr -n 0
                retry: Retrying unchanged usually fails the same way, unless the cause was outside the job.
            "#]],
        );
    }
}
