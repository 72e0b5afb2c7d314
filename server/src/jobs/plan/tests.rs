use super::*;
use expect_test::{Expect, expect};

fn node(name: &str, gpus: u32, busy: &[u32], labels: &[(&str, &str)]) -> NodeCapacity {
    NodeCapacity {
        id: format!("node_{name}"),
        name: name.to_string(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        runners: Some(vec![Runner::Process]),
        gpus: (0..gpus).collect(),
        busy_gpus: busy.iter().copied().collect(),
        cpu_jobs: 0,
        running: Vec::new(),
        window: None,
    }
}

fn rules(cpu_slots: u32) -> Rules {
    Rules {
        cpu_slots_per_node: cpu_slots,
        preempt_priority: None,
    }
}

fn job(id: &str, gpus: u32, priority: i64) -> QueuedJob {
    QueuedJob {
        id: id.to_string(),
        gpus,
        priority,
        node_selector: BTreeMap::new(),
        runner: Runner::Process,
        not_before: None,
        next_attempt: 1,
        max_attempts: 1,
        project: "default".to_string(),
        user: None,
        after: Vec::new(),
        queued_at: 0,
        fair_share_note: None,
        time_limit_ms: None,
        resume_node: None,
        nodes: 1,
        colocate: None,
        array: None,
    }
}

fn check(queue: &[QueuedJob], nodes: &[NodeCapacity], cpu_slots: u32, expected: Expect) {
    check_with(queue, nodes, &Quotas::default(), cpu_slots, expected);
}

/// Renders a plan as `job -> node [gpus]` and `job: reason` lines.
fn check_with(
    queue: &[QueuedJob],
    nodes: &[NodeCapacity],
    quotas: &Quotas,
    cpu_slots: u32,
    expected: Expect,
) {
    let plan = plan(
        queue,
        nodes,
        quotas,
        &NodeAccess::default(),
        rules(cpu_slots),
        1_000_000,
    );
    expected.assert_eq(&render(&plan));
}

#[test]
fn jobs_see_only_the_nodes_their_projects_node_policy_opens() {
    use gpuplane_api::project::NodePolicy;
    let access = NodeAccess::new(HashMap::from([
        (
            "vision".to_string(),
            NodePolicy {
                labels: BTreeMap::from([("team".to_string(), "vision".to_string())]),
                runners: vec![Runner::Process, Runner::Docker],
            },
        ),
        (
            "hpc".to_string(),
            NodePolicy {
                labels: BTreeMap::new(),
                runners: vec![Runner::Slurm],
            },
        ),
    ]));
    let mut vision_host = node("n1", 2, &[], &[("team", "vision")]);
    vision_host.runners = Some(vec![Runner::Process, Runner::Docker]);
    let plain = node("n2", 2, &[], &[]);
    let mut slurm_host = node("n3", 2, &[], &[]);
    slurm_host.runners = Some(vec![Runner::Slurm]);
    let mut old_agent = node("n4", 2, &[], &[]);
    old_agent.runners = None;
    let of = |id: &str, project: &str, runner: Runner, selector: &[(&str, &str)]| {
        let mut job = job(id, 1, 0);
        job.project = project.to_string();
        job.runner = runner;
        job.node_selector = selector
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        job
    };
    let queue = [
        of("a", "default", Runner::Process, &[]),
        of("b", "default", Runner::Process, &[("team", "vision")]),
        of("c", "vision", Runner::Docker, &[]),
        of("d", "hpc", Runner::Process, &[]),
        of("e", "default", Runner::Docker, &[]),
        of("f", "vision", Runner::Process, &[("team", "nlp")]),
    ];
    let nodes = [vision_host, plain, slurm_host, old_agent];
    let plan = plan(&queue, &nodes, &Quotas::default(), &access, rules(4), 1_000_000);
    expect![[r#"
        a -> n2 [0]
        c -> n1 [0]
        d -> n3 [0]
        b: node policy: the one online node its node_selector matches is not open to a process job of project default (it may use nodes no policy reserves; runners: process; the nodes offer: n1 (process, docker, reserved))
        e: node policy: none of the 4 online nodes is open to a docker job of project default (it may use nodes no policy reserves; runners: process; the nodes offer: n1 (process, docker, reserved), n2 (process), n3 (slurm), n4 (its agent does not say: upgrade it))
        f: node_selector team=nlp matches no online node
    "#]]
    .assert_eq(&render(&plan));
    assert_eq!(
        plan.unmatched,
        ["f"],
        "only a selector matching no node counts as unmatched"
    );
}

/// A plan as `job -> node [gpus]`, `stop job#attempt on node for job`
/// and `job: reason` lines.
fn render(plan: &Plan) -> String {
    let mut out = String::new();
    for p in &plan.placements {
        out.push_str(&format!(
            "{} -> {} {:?}",
            p.job_id,
            p.node_id.trim_start_matches("node_"),
            p.gpus
        ));
        for (node_id, gpus) in &p.others {
            out.push_str(&format!(" + {} {gpus:?}", node_id.trim_start_matches("node_")));
        }
        out.push('\n');
    }
    for p in &plan.preemptions {
        out.push_str(&format!(
            "stop {}#{} on {} for {} (priority {})\n",
            p.job_id,
            p.attempt,
            p.node_id.trim_start_matches("node_"),
            p.for_job,
            p.for_priority
        ));
    }
    for (job, reason) in &plan.reasons {
        out.push_str(&format!("{job}: {reason}\n"));
    }
    out
}

#[test]
fn everything_that_fits_is_placed_in_one_pass() {
    check(
        &[job("a", 1, 0), job("b", 2, 0), job("c", 0, 0), job("d", 1, 0)],
        &[node("n1", 4, &[], &[])],
        4,
        expect![[r#"
            a -> n1 [0]
            b -> n1 [1, 2]
            c -> n1 []
            d -> n1 [3]
        "#]],
    );
}

#[test]
fn a_blocked_multi_gpu_head_holds_one_node_and_smaller_jobs_backfill_elsewhere() {
    // n1 has 2 free of 4, n2 has 1 free of 2. The 4-GPU head holds n1;
    // the 1-GPU job backfills onto n2; the cpu job runs anyway.
    check(
        &[
            job("big", 4, 10),
            job("small", 1, 0),
            job("cpu", 0, 0),
            job("small2", 1, 0),
        ],
        &[node("n1", 4, &[0, 1], &[]), node("n2", 2, &[0], &[])],
        4,
        expect![[r#"
            small -> n2 [1]
            cpu -> n1 []
            big: needs 4 GPUs; the largest free on a matching node is 2; holding n1 (2 of 4 free) until running jobs there finish
            small2: needs 1 GPU; the largest free on a matching node is 0; holding n2 (0 of 2 free) until running jobs there finish
        "#]],
    );
}

#[test]
fn the_held_job_starts_once_its_node_frees_up() {
    check(
        &[job("big", 4, 10), job("small", 1, 0)],
        &[node("n1", 4, &[], &[]), node("n2", 2, &[0, 1], &[])],
        4,
        expect![[r#"
            big -> n1 [0, 1, 2, 3]
            small: needs 1 GPU; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
        "#]],
    );
}

#[test]
fn queued_reasons_name_what_is_missing() {
    let mut selective = job("sel", 1, 0);
    selective.node_selector.insert("gpu".into(), "a100".into());
    let mut cooling = job("cool", 1, 0);
    cooling.not_before = Some(1_004_500);
    cooling.next_attempt = 2;
    cooling.max_attempts = 3;
    check(
        &[
            selective,
            job("huge", 16, 0),
            cooling,
            job("cpu1", 0, 0),
            job("cpu2", 0, 0),
        ],
        &[node("n1", 8, &[], &[("gpu", "h100")])],
        1,
        expect![[r#"
            cpu1 -> n1 []
            sel: node_selector gpu=a100 matches no online node
            huge: no node can ever fit 16 GPUs (the largest matching node has 8)
            cool: retry cooldown: attempt 2 of 3 starts at 1970-01-01T00:16:44.500Z
            cpu2: cpu lane full (1/1) on n1
        "#]],
    );
    check(
        &[job("any", 1, 0)],
        &[],
        4,
        expect![[r#"
            any: no node is online: start gpuplane-agent on a GPU host
        "#]],
    );
}

#[test]
fn gpu_jobs_pack_tightly() {
    // The 1-GPU job goes where only 1 is free, keeping n1's 4 for the 4-GPU job.
    check(
        &[job("one", 1, 0), job("four", 4, 0)],
        &[node("n1", 4, &[], &[]), node("n2", 2, &[0], &[])],
        4,
        expect![[r#"
            one -> n2 [1]
            four -> n1 [0, 1, 2, 3]
        "#]],
    );
}

#[test]
fn the_earliest_cooldown_end_is_the_next_wake_up() {
    let mut a = job("a", 1, 0);
    a.not_before = Some(1_009_000);
    let mut b = job("b", 1, 0);
    b.not_before = Some(1_003_000);
    let plan = plan(
        &[a, b],
        &[node("n1", 1, &[], &[])],
        &Quotas::default(),
        &NodeAccess::default(),
        rules(4),
        1_000_000,
    );
    assert_eq!(plan.wake_at, Some(1_003_000));
    assert!(plan.placements.is_empty());
}

#[test]
fn over_quota_jobs_wait_without_holding_anything_and_others_still_start() {
    let in_project = |id: &str, gpus: u32, project: &str, user: &str| QueuedJob {
        project: project.to_string(),
        user: Some(user.to_string()),
        ..job(id, gpus, 0)
    };
    let quota =
        |label: &str, max_gpus: Option<u32>, max_jobs: Option<u32>, gpus_in_use: u32, running_jobs: u32| {
            Quota {
                label: label.to_string(),
                max_gpus,
                max_running_jobs: max_jobs,
                gpus_in_use,
                running_jobs,
            }
        };
    let quotas = Quotas {
        projects: HashMap::from([
            ("vision".to_string(), quota("project vision", Some(8), None, 6, 2)),
            ("nlp".to_string(), quota("project nlp", None, Some(1), 0, 0)),
        ]),
        users: HashMap::from([("usr_bob".to_string(), quota("user bob", Some(1), None, 1, 1))]),
        arrays: HashMap::new(),
    };
    check_with(
        &[
            in_project("v1", 2, "vision", "usr_alice"),
            in_project("v2", 1, "vision", "usr_alice"),
            in_project("v-big", 16, "vision", "usr_alice"),
            in_project("n1", 1, "nlp", "usr_alice"),
            in_project("n2", 0, "nlp", "usr_alice"),
            in_project("bob", 1, "default", "usr_bob"),
            in_project("bob-cpu", 0, "default", "usr_bob"),
            in_project("free", 4, "default", "usr_alice"),
        ],
        &[node("n1", 8, &[], &[])],
        &quotas,
        4,
        expect![[r#"
            v1 -> n1 [0, 1]
            n1 -> n1 [2]
            bob-cpu -> n1 []
            free -> n1 [3, 4, 5, 6]
            v2: quota: project vision uses 8 of 8 GPUs
            v-big: quota: this job needs 16 GPUs but project vision may use at most 8
            n2: quota: project nlp runs 1 of 1 jobs
            bob: quota: user bob uses 1 of 1 GPUs
        "#]],
    );
    // Partly used: the reason says what the job needs.
    let quotas = Quotas {
        projects: HashMap::from([("vision".to_string(), quota("project vision", Some(8), None, 6, 2))]),
        users: HashMap::new(),
        arrays: HashMap::new(),
    };
    check_with(
        &[in_project("v4", 4, "vision", "usr_alice")],
        &[node("n1", 8, &[], &[])],
        &quotas,
        4,
        expect![[r#"
            v4: quota: project vision uses 6 of 8 GPUs; this job needs 4
        "#]],
    );
}

/// A node of 4 GPUs with attempts running on it: (job, priority, gpus,
/// started_at, already preempted).
fn busy_node(name: &str, running: &[(&str, i64, u32, i64, bool)]) -> NodeCapacity {
    let mut node = node(name, 4, &[], &[]);
    let mut next_gpu = 0;
    for &(job_id, priority, gpus, started_at, preempted) in running {
        node.busy_gpus.extend(next_gpu..next_gpu + gpus);
        next_gpu += gpus;
        node.running.push(RunningAttempt {
            job_id: job_id.to_string(),
            attempt: 1,
            priority,
            gpus,
            started_at,
            preempted,
            started: true,
        });
    }
    node
}

fn check_preempting(queue: &[QueuedJob], nodes: &[NodeCapacity], expected: Expect) {
    let rules = Rules {
        cpu_slots_per_node: 4,
        preempt_priority: Some(100),
    };
    let access = NodeAccess::default();
    expected.assert_eq(&render(&plan(
        queue,
        nodes,
        &Quotas::default(),
        &access,
        rules,
        1_000_000,
    )));
}

#[test]
fn an_urgent_job_preempts_the_fewest_lowest_newest_jobs_and_holds_their_node() {
    check_preempting(
        &[job("urgent", 2, 100), job("small", 1, 0)],
        &[
            // n1: two jobs would have to stop (the priority-50 one is
            // taken last, so a and b); n2: one is enough, and of its two
            // priority-0 jobs the newest loses least work.
            busy_node(
                "n1",
                &[
                    ("a", 0, 1, 10, false),
                    ("b", 0, 1, 20, false),
                    ("c", 50, 2, 30, false),
                ],
            ),
            busy_node("n2", &[("old", 0, 2, 10, false), ("new", 0, 2, 50, false)]),
        ],
        expect![[r#"
            stop new#1 on n2 for urgent (priority 100)
            urgent: needs 2 GPUs; preempting new (priority 0) on n2: it starts there when they stop
            small: needs 1 GPU; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
        "#]],
    );
}

#[test]
fn jobs_already_stopping_are_waited_for_not_stopped_again() {
    check_preempting(
        &[job("urgent", 2, 100)],
        &[busy_node("n1", &[("a", 0, 2, 10, true), ("b", 0, 2, 20, false)])],
        expect![[r#"
            urgent: needs 2 GPUs; waiting for preempted jobs on n1 to stop (a), then it starts there
        "#]],
    );
}

#[test]
fn no_preemption_below_the_threshold_of_equal_priorities_or_when_it_would_not_free_enough() {
    let n1 = || {
        [busy_node(
            "n1",
            &[("low", 0, 2, 10, false), ("same", 150, 2, 20, false)],
        )]
    };
    // 99 is below preempt_priority: it waits as any job does.
    check_preempting(
        &[job("below", 2, 99)],
        &n1(),
        expect![[r#"
            below: needs 2 GPUs; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
        "#]],
    );
    // Stopping "low" frees 2, and "same" has the job's own priority.
    check_preempting(
        &[job("peer", 4, 150)],
        &n1(),
        expect![[r#"
            peer: needs 4 GPUs; the largest free on a matching node is 0; holding n1 (0 of 4 free) until running jobs there finish
        "#]],
    );
    // The node a preempting job holds is nobody else's to preempt on.
    check_preempting(
        &[job("peer", 2, 150), job("urgent", 2, 120)],
        &n1(),
        expect![[r#"
            stop low#1 on n1 for peer (priority 150)
            peer: needs 2 GPUs; preempting low (priority 0) on n1: it starts there when they stop
            urgent: needs 2 GPUs; the largest free on a matching node is 0, and matching nodes are held for earlier jobs (e.g. peer, priority 150, needs 2 GPUs)
        "#]],
    );
}

#[test]
fn a_job_passed_by_fair_share_says_so_in_its_capacity_reason() {
    let passed = QueuedJob {
        fair_share_note: Some("fair share: …".to_string()),
        ..job("passed", 1, 0)
    };
    check(
        &[job("light", 1, 0), passed],
        &[node("n1", 1, &[], &[])],
        4,
        expect![[r#"
            light -> n1 [0]
            passed: needs 1 GPU; the largest free on a matching node is 0; holding n1 (0 of 1 free) until running jobs there finish; fair share: …
        "#]],
    );
}

#[test]
fn scheduling_windows_keep_out_jobs_that_would_not_end_inside_them() {
    use crate::config::windows::Window;
    let day = 1_796_083_200_000; // 2026-12-01T00:00:00Z
    let now = day + 5 * 3_600_000 + 30 * 60_000; // 05:30, half an hour before the night ends
    let mut night = node("night-1", 2, &[], &[("pool", "night")]);
    night.window = Some(Window::parse("pool=night 20:00-06:00").unwrap().at(now));
    let day_node = node("day-1", 1, &[], &[("pool", "day")]);
    let with_limit = |id: &str, minutes: Option<i64>, pool: &str| QueuedJob {
        time_limit_ms: minutes.map(|m| m * 60_000),
        resume_node: None,
        nodes: 1,
        colocate: None,
        array: None,
        node_selector: BTreeMap::from([("pool".to_string(), pool.to_string())]),
        runner: Runner::Process,
        ..job(id, 1, 0)
    };
    let queue = [
        with_limit("two-hours", Some(120), "night"),
        with_limit("ten-minutes", Some(10), "night"),
        with_limit("no-limit", None, "night"),
        with_limit("daytime", Some(120), "day"),
    ];
    let plan = plan(
        &queue,
        &[night, day_node],
        &Quotas::default(),
        &NodeAccess::default(),
        rules(4),
        now,
    );
    expect![[r#"
        ten-minutes -> night-1 [0]
        no-limit -> night-1 [1]
        daytime -> day-1 [0]
        two-hours: its time limit 2h does not fit in what is left of scheduling window pool=night 20:00-06:00 UTC (30m): it starts when the window opens at 2026-12-01T20:00:00.000Z (in 14h30m)
    "#]]
    .assert_eq(&render(&plan));
    assert_eq!(
        plan.wake_at,
        Some(day + 20 * 3_600_000),
        "planned again when the window opens"
    );
}

#[test]
fn a_resumed_job_goes_back_to_the_node_holding_its_checkpoint_when_that_node_fits_it() {
    let resumed = |id: &str, gpus: u32, on: &str| QueuedJob {
        resume_node: Some(format!("node_{on}")),
        nodes: 1,
        colocate: None,
        array: None,
        ..job(id, gpus, 0)
    };
    // Best fit alone would pick a (1 free) first; the checkpoints are on b
    // (which fits) and c (full: r2 goes where it fits best).
    let nodes = [
        node("a", 2, &[0], &[]),
        node("b", 4, &[], &[]),
        node("c", 2, &[0, 1], &[]),
    ];
    check(
        &[resumed("r1", 1, "b"), resumed("r2", 1, "c"), job("fresh", 1, 0)],
        &nodes,
        4,
        expect![[r#"
            r1 -> b [0]
            r2 -> a [1]
            fresh -> b [1]
        "#]],
    );
}

fn gang(id: &str, nodes: u32, gpus: u32, priority: i64) -> QueuedJob {
    QueuedJob {
        nodes,
        ..job(id, gpus, priority)
    }
}

#[test]
fn a_gang_starts_on_all_its_nodes_at_once_the_tightest_fits_first() {
    let nodes = [
        node("a", 4, &[], &[]),
        node("b", 4, &[0, 1], &[]),
        node("c", 4, &[0, 1], &[]),
        node("d", 2, &[], &[]),
    ];
    check(
        &[gang("g", 3, 2, 0), job("small", 2, 0)],
        &nodes,
        4,
        expect![[r#"
            g -> b [2, 3] + c [2, 3] + d [0, 1]
            small -> a [0, 1]
        "#]],
    );
}

#[test]
fn a_gang_that_cannot_start_holds_every_node_it_needs_or_none() {
    let nodes = [
        node("a", 4, &[0, 1, 2], &[]),
        node("b", 4, &[0, 1], &[]),
        node("c", 4, &[], &[]),
        node("d", 4, &[0, 1, 2, 3], &[]),
    ];
    // g1 needs 3 nodes with 4 free: c has them; it holds c, b, a (the most
    // free first). g2 finds too few unheld nodes: it holds nothing. The
    // small job may not backfill into g1's nodes; d is full.
    check(
        &[gang("g1", 3, 4, 10), gang("g2", 2, 4, 5), job("small", 1, 0)],
        &nodes,
        4,
        expect![[r#"
            g1: needs 3 nodes with 4 free GPUs; 1 has them; holding c, b, a until running jobs there finish
            g2: needs 2 nodes with 4 free GPUs; 0 have them, and matching nodes are held for earlier jobs (e.g. g1, priority 10)
            small: needs 1 GPU; the largest free on a matching node is 0; holding d (0 of 4 free) until running jobs there finish
        "#]],
    );
}

#[test]
fn a_gang_that_can_never_fit_says_why_and_holds_nothing() {
    let nodes = [node("a", 8, &[], &[]), node("b", 4, &[], &[])];
    check(
        &[gang("big", 2, 8, 0), job("after", 4, 0)],
        &nodes,
        4,
        expect![[r#"
            after -> b [0, 1, 2, 3]
            big: needs 2 nodes with 8 GPUs each; only 1 matching node has 8 GPUs
        "#]],
    );
}

#[test]
fn colocated_members_share_one_value_of_the_label() {
    let nodes = [
        node("a1", 2, &[], &[("rack", "a")]),
        node("b1", 2, &[], &[("rack", "b")]),
        node("b2", 2, &[0], &[("rack", "b")]),
        node("b3", 2, &[], &[("rack", "b")]),
        node("x", 2, &[], &[]),
    ];
    let colocated = |id: &str, nodes: u32| QueuedJob {
        colocate: Some("rack".to_string()),
        ..gang(id, nodes, 1, 0)
    };
    check(
        &[colocated("two", 2), colocated("three", 3), colocated("four", 4)],
        &nodes,
        4,
        expect![[r#"
            two -> b2 [1] + b1 [0]
            three: needs 3 nodes with 1 free GPU; 2 have them; holding b3, b1, b2 until running jobs there finish
            four: needs 4 nodes with 1 GPU each sharing one value of label rack; at most 3 matching nodes do
        "#]],
    );
}

#[test]
fn a_gangs_quota_counts_every_members_gpus_and_its_checkpoint_node_goes_first() {
    let quotas = Quotas {
        projects: HashMap::from([(
            "default".to_string(),
            Quota {
                label: "project default".to_string(),
                max_gpus: Some(5),
                max_running_jobs: None,
                gpus_in_use: 0,
                running_jobs: 0,
            },
        )]),
        users: HashMap::new(),
        arrays: HashMap::new(),
    };
    let nodes = [
        node("a", 2, &[], &[]),
        node("b", 2, &[], &[]),
        node("c", 2, &[], &[]),
    ];
    let resumed = QueuedJob {
        resume_node: Some("node_c".to_string()),
        ..gang("resumed", 2, 2, 0)
    };
    check_with(
        &[resumed, gang("second", 2, 1, 0)],
        &nodes,
        &quotas,
        4,
        expect![[r#"
            resumed -> c [0, 1] + a [0, 1]
            second: quota: project default uses 4 of 5 GPUs; this job needs 2
        "#]],
    );
}

#[test]
fn an_arrays_limit_keeps_its_running_tasks_to_the_limit_like_a_quota() {
    let task = |id: &str, array: &str| QueuedJob {
        array: Some(array.to_string()),
        ..job(id, 1, 0)
    };
    let quotas = Quotas {
        arrays: HashMap::from([
            (
                "arr_a".to_string(),
                ArrayLimit {
                    max_running: 2,
                    running: 1,
                },
            ),
            (
                "arr_b".to_string(),
                ArrayLimit {
                    max_running: 1,
                    running: 1,
                },
            ),
        ]),
        ..Quotas::default()
    };
    check_with(
        &[
            task("a1", "arr_a"),
            task("a2", "arr_a"),
            task("b1", "arr_b"),
            task("c1", "arr_c"),
            job("plain", 1, 0),
        ],
        &[node("n1", 8, &[], &[])],
        &quotas,
        4,
        expect![[r#"
            a1 -> n1 [0]
            c1 -> n1 [1]
            plain -> n1 [2]
            a2: array arr_a: 2 of its tasks run, at most 2 at once (%2)
            b1: array arr_b: 1 of its tasks run, at most 1 at once (%1)
        "#]],
    );
}
