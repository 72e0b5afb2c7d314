//! The rules against realistic log excerpts, one test (at least) per rule.

use super::*;
use expect_test::{Expect, expect};
use gpuplane_api::event::{EventKind, Severity};
use gpuplane_api::log::LogStream;

fn lines(stderr: &str) -> Vec<LogLine> {
    stderr
        .lines()
        .enumerate()
        .map(|(i, text)| {
            // `[rank N] text`: a line of member N of a multi-node job.
            let (rank, text) = match text.strip_prefix("[rank ").and_then(|rest| rest.split_once("] ")) {
                Some((rank, text)) => (rank.parse().unwrap(), text),
                None => (0, text),
            };
            LogLine {
                n: i as i64 + 1,
                stream: LogStream::Stderr,
                text: text.to_string(),
                attempt: 1,
                time: "2026-11-30T00:00:00.000Z".into(),
                rank,
            }
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
        message:
            "GPU 0 on box reported Xid 79 (the GPU has fallen off the bus: hardware, power or a PCIe fault)"
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
fn one_rank_out_of_memory_is_the_cause_not_the_others_lost_connections() {
    check(
        facts(
            FailureReason::ExitCode,
            "rank 0 on gpu-01: exited with code 1",
            "[rank 1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n\
             RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.2]:52311",
        ),
        expect![[r#"
            cuda-oom | CUDA out of memory
            The GPU ran out of memory: [rank 1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)
              line 1: [rank 1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)
            first action: lower the batch size (keep the effective batch with gradient accumulation)
            retry: Retrying unchanged will fail the same way; lower the batch size or enable gradient checkpointing, then retry with --set (e.g. --set env.BATCH_SIZE=16).
        "#]],
    );
}

#[test]
fn a_rendezvous_that_never_completes() {
    check(
        facts(
            FailureReason::ExitCode,
            "rank 1 on gpu-02: exited with code 1",
            "[rank 1] torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
        ),
        expect![[r#"
            rendezvous-timeout | distributed rendezvous timeout
            The job's ranks never all met at the rendezvous: [rank 1] torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.
              line 1: [rank 1] torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.
            first action: read every member's log: gpuctl logs JOB --rank 1 (and each other rank)
            retry: Retrying unchanged meets the same wall unless the other member's failure was transient; fix the address or the failing member first.
        "#]],
    );
}

#[test]
fn a_rank_that_cannot_reach_another() {
    check(
        facts(
            FailureReason::ExitCode,
            "rank 1 on gpu-02: exited with code 1",
            "Traceback (most recent call last):\n\
             RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:210] connect [10.0.0.1]:29500: Connection refused",
        ),
        expect![[r#"
            distributed-connection | distributed connection refused or reset
            A rank could not reach another (or lost it): RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:210] connect [10.0.0.1]:29500: Connection refused
              line 2: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:210] connect [10.0.0.1]:29500: Connection refused
            first action: find the member that failed first: the attempt's failure names it (rank N on NODE); read its log with gpuctl logs JOB --rank N
            retry: If another member's crash caused it, fix that one; a transient network fault may pass on retry.
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
    let tests = include_str!("tests.rs");
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
