//! Multi-node jobs through the agent protocol, with agents played by the
//! test: what each member's node is told (the rendezvous variables, rank
//! 0's port only once rank 0 chose it), that a node speaks only for its
//! own member, and hostile specs, addresses and log queries.

use crate::People;
use gpuplane_api::auth::Scope;
use gpuplane_testkit::{TestServer, agent_token, eventually, simulated_gpu, user_token};
use reqwest::StatusCode;
use serde_json::{Value, json};

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

fn hello(name: &str, gpus: u32, address: &str) -> Value {
    let gpus: Vec<Value> = (0..gpus)
        .map(|i| serde_json::to_value(simulated_gpu(i)).unwrap())
        .collect();
    json!({"name": name, "hostname": name, "gpus": gpus, "agent_version": "test",
           "runners": ["process"], "advertise_addr": address})
}

fn poll(node_id: &str, running: Value) -> Value {
    json!({"node_id": node_id, "gpus": [], "running": running})
}

/// The dispatch a poll answer carries for `job_id`, if any.
fn dispatch_of(answer: &Value, job_id: &str) -> Option<Value> {
    answer["commands"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "dispatch" && c["job_id"] == job_id)
        .cloned()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_member_is_told_the_rendezvous_and_speaks_only_for_itself() {
    let f = TestServer::start().await;
    let db = &f.server.state.db;
    let user = user_token(db, "ada", Scope::Write, true).await;

    // An address a shell or URL would read otherwise is refused at hello.
    let stranger = agent_token(db).await;
    for hostile in ["-oProxyCommand=x", "a b", "10.0.0.1\u{1b}[31m", "x;rm", ""] {
        let (status, body) = f.post("/agent/hello", &stranger, hello("n-x", 1, hostile)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{hostile:?}: {body}");
        assert_eq!(body["error"]["details"][0]["field"], "advertise_addr", "{body}");
    }

    let mut nodes = Vec::new();
    for (name, address) in [("n-a", "10.0.0.1"), ("n-b", "10.0.0.2")] {
        let token = agent_token(db).await;
        let (status, welcome) = f.post("/agent/hello", &token, hello(name, 1, address)).await;
        assert_eq!(status, StatusCode::OK, "{welcome}");
        nodes.push((token, welcome["node_id"].as_str().unwrap().to_string()));
    }
    // A third node with a GPU free, not a member: it never speaks for one.
    let outsider = agent_token(db).await;
    let (_, welcome) = f
        .post("/agent/hello", &outsider, hello("n-c", 0, "10.0.0.3"))
        .await;
    let outsider_node = welcome["node_id"].as_str().unwrap().to_string();

    let (status, body) = f.post("/projects", &user, json!({"name": "vision"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, job) = f
        .post(
            "/jobs",
            &user,
            json!({"name": "pair", "project": "vision", "command": ["torchrun", "train.py"],
                   "resources": {"gpu": 1, "nodes": 2}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_str().unwrap().to_string();

    // Rank 0's node gets the dispatch first, told to choose the port.
    let (rank0, rank1, first) = eventually("rank 0's dispatch", WAIT, || async {
        for (i, (token, node)) in nodes.iter().enumerate() {
            let (_, answer) = f.post("/agent/poll", token, poll(node, json!([]))).await;
            if let Some(dispatch) = dispatch_of(&answer, &job_id) {
                return Some((i, 1 - i, dispatch));
            }
        }
        None
    })
    .await;
    assert_eq!(first["choose_master_port"], true, "{first}");
    let env = &first["env"];
    let addresses = if rank0 == 0 {
        "10.0.0.1,10.0.0.2"
    } else {
        "10.0.0.2,10.0.0.1"
    };
    assert_eq!(env["GPUCTL_NODE_RANK"], "0");
    assert_eq!(env["PET_NODE_RANK"], "0");
    assert_eq!(env["GPUCTL_NNODES"], "2");
    assert_eq!(env["PET_NPROC_PER_NODE"], "1");
    assert_eq!(env["GPUCTL_NODE_ADDRS"], addresses);
    assert_eq!(env["MASTER_ADDR"], addresses.split(',').next().unwrap());
    assert!(env.get("MASTER_PORT").is_none(), "{env}");
    let (token0, node0) = &nodes[rank0];
    let (token1, node1) = &nodes[rank1];
    // Rank 1 waits for the port.
    let (_, answer) = f.post("/agent/poll", token1, poll(node1, json!([]))).await;
    assert!(dispatch_of(&answer, &job_id).is_none(), "{answer}");

    // The outsider's reports about the attempt change nothing, nor does a
    // port from rank 1.
    let forged = json!({"node_id": outsider_node, "items": [
        {"type": "started", "job_id": job_id, "attempt": 1, "pid": 1, "time": 1, "master_port": 6666},
        {"type": "exited", "job_id": job_id, "attempt": 1, "exit_code": 1, "signal": null,
         "oom_killed": false, "cancelled": false, "time": 2}]});
    assert_eq!(
        f.post("/agent/report", &outsider, forged).await.0,
        StatusCode::NO_CONTENT
    );
    let early = json!({"node_id": node1, "items": [
        {"type": "started", "job_id": job_id, "attempt": 1, "pid": 1, "time": 1, "master_port": 7777}]});
    assert_eq!(
        f.post("/agent/report", token1, early).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, shown) = f.get(&format!("/jobs/{job_id}"), &user).await;
    assert_eq!(shown["status"], "DISPATCHING", "{shown}");

    // Rank 0 starts with its port: rank 1 is dispatched with it.
    let started = json!({"node_id": node0, "items": [
        {"type": "started", "job_id": job_id, "attempt": 1, "pid": 1, "time": 1, "master_port": 29400}]});
    assert_eq!(
        f.post("/agent/report", token0, started).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, answer) = f.post("/agent/poll", token1, poll(node1, json!([]))).await;
    let second = dispatch_of(&answer, &job_id).expect("rank 1's dispatch");
    assert_eq!(second["env"]["GPUCTL_NODE_RANK"], "1");
    assert_eq!(second["env"]["MASTER_PORT"], "29400");
    assert_eq!(second["env"]["PET_MASTER_PORT"], "29400");
    assert_eq!(second["env"]["GPUCTL_NODE_ADDRS"], addresses);
    assert_eq!(second.get("choose_master_port"), None, "{second}");

    // Logs per rank: lines numbered from 1 on each member, kept apart.
    for (token, node, text) in [(token0, node0, "from rank 0"), (token1, node1, "from rank 1")] {
        let lines = json!({"node_id": node, "items": [
            {"type": "lines", "job_id": job_id, "attempt": 1, "stream": "stdout", "first_n": 1, "time": 3,
             "lines": [text]}]});
        assert_eq!(
            f.post("/agent/report", token, lines).await.0,
            StatusCode::NO_CONTENT
        );
    }
    let (_, one) = f.get(&format!("/jobs/{job_id}/logs?rank=1"), &user).await;
    assert_eq!(one["lines"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(
        (one["lines"][0]["text"].as_str(), one["lines"][0]["rank"].as_i64()),
        (Some("from rank 1"), Some(1))
    );
    let (_, both) = f.get(&format!("/jobs/{job_id}/logs"), &user).await;
    assert_eq!(both["lines"].as_array().unwrap().len(), 2, "{both}");
    for hostile in ["rank=-1", "rank=256", "rank=abc", "rank=1%27%20OR%201=1"] {
        let (status, body) = f.get(&format!("/jobs/{job_id}/logs?{hostile}"), &user).await;
        assert!(
            status == StatusCode::UNPROCESSABLE_ENTITY || status == StatusCode::BAD_REQUEST,
            "{hostile}: {status} {body}"
        );
    }
    // Another project's user sees neither the job nor a member's lines.
    let stranger_user = user_token(db, "eve", Scope::Write, false).await;
    let (status, _) = f
        .get(&format!("/jobs/{job_id}/logs?rank=1"), &stranger_user)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Rank 1 fails: the attempt fails in its name, rank 0 is told to stop.
    let running = json!([{"job_id": job_id, "attempt": 1}]);
    let failed = json!({"node_id": node1, "items": [
        {"type": "exited", "job_id": job_id, "attempt": 1, "exit_code": 3, "signal": null,
         "oom_killed": false, "cancelled": false, "time": 4}]});
    assert_eq!(
        f.post("/agent/report", token1, failed).await.0,
        StatusCode::NO_CONTENT
    );
    let (_, shown) = f.get(&format!("/jobs/{job_id}"), &user).await;
    assert_eq!(shown["status"], "FAILED", "{shown}");
    assert!(
        shown["failure_detail"]
            .as_str()
            .unwrap()
            .starts_with("rank 1 on "),
        "{shown}"
    );
    let (_, answer) = f.post("/agent/poll", token0, poll(node0, running.clone())).await;
    assert!(
        answer["commands"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "cancel" && c["job_id"] == job_id),
        "{answer}"
    );
    // Rank 0 holds its GPUs until its own agent says it ended.
    let members = &shown["attempts"][0]["members"];
    assert_eq!(
        (members[0]["state"].as_str(), members[1]["state"].as_str()),
        (Some("RUNNING"), Some("FAILED")),
        "{members}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_multi_node_specs_are_refused_naming_the_field() {
    let f = TestServer::start().await;
    let user = user_token(&f.server.state.db, "ada", Scope::Write, true).await;
    let cases = [
        (json!({"gpu": 1, "nodes": 0}), "resources.nodes"),
        (json!({"gpu": 1, "nodes": 257}), "resources.nodes"),
        (json!({"gpu": 1, "nodes": -3}), "resources.nodes"),
        (json!({"gpu": 0, "nodes": 2}), "resources.nodes"),
        (json!({"gpu": 1, "colocate": "rack"}), "resources.colocate"),
        (
            json!({"gpu": 1, "nodes": 2, "colocate": "a b"}),
            "resources.colocate",
        ),
        (
            json!({"gpu": 1, "nodes": 2, "colocate": "\u{1b}]0;x\u{7}"}),
            "resources.colocate",
        ),
    ];
    for (resources, field) in cases {
        let (status, body) = f
            .post(
                "/jobs",
                &user,
                json!({"name": "bad", "command": ["true"], "resources": resources}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{resources}: {body}");
        assert_eq!(body["error"]["details"][0]["field"], field, "{resources}: {body}");
    }
    let (status, body) = f
        .post(
            "/jobs",
            &user,
            json!({"name": "slurm", "command": ["true"], "runner": "slurm",
                   "resources": {"gpu": 1, "nodes": 2, "colocate": "rack"}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["error"]["details"][0]["field"], "resources.colocate",
        "{body}"
    );
    // No half-written row: nothing was queued.
    let (_, jobs) = f.get("/jobs", &user).await;
    assert_eq!(jobs["items"].as_array().unwrap().len(), 0, "{jobs}");
}

/// Say hello as `name` (one GPU, at `address`); its token and node id.
async fn register(f: &TestServer, name: &str, address: &str) -> (String, String) {
    let token = agent_token(&f.server.state.db).await;
    let (status, welcome) = f.post("/agent/hello", &token, hello(name, 1, address)).await;
    assert_eq!(status, StatusCode::OK, "{welcome}");
    (token, welcome["node_id"].as_str().unwrap().to_string())
}

/// Another project's editor, a viewer, a token limited to another project
/// and the job's own sdk token each try a two-node job's routes: none
/// submits one, reads a member's lines or stops it.
#[tokio::test(flavor = "multi_thread")]
async fn a_multi_node_job_and_its_ranks_stay_inside_their_project() {
    let f = TestServer::start().await;
    let people = People::of_vision(&f).await;
    let People {
        admin,
        viewer,
        outsider,
        limited,
    } = people.clone();
    let (token0, node0) = register(&f, "n-a", "10.0.0.1").await;
    let (token1, node1) = register(&f, "n-b", "10.0.0.2").await;
    let spec = json!({"name": "pair", "project": "vision", "command": ["torchrun", "train.py"],
                      "resources": {"gpu": 1, "nodes": 2, "colocate": "rack\u{1b}[2J"}});
    // Hostile text in the label is refused before anything else.
    let (status, body) = f.post("/jobs", &admin, spec.clone()).await;
    assert_eq!(
        (status, body["error"]["details"][0]["field"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("resources.colocate"))
    );
    let mut spec = spec;
    spec["resources"] = json!({"gpu": 1, "nodes": 2});
    // Submitting into vision: the viewer is refused, the outsider and the
    // limited token do not see the project.
    for (token, expected) in [
        (&viewer, StatusCode::FORBIDDEN),
        (&outsider, StatusCode::UNPROCESSABLE_ENTITY),
        (&limited, StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let (status, body) = f.post("/jobs", token, spec.clone()).await;
        assert_eq!(status, expected, "{body}");
    }
    let (status, job) = f.post("/jobs", &admin, spec).await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let job_id = job["id"].as_str().unwrap().to_string();
    let run_id = job["run_id"].as_str().unwrap().to_string();
    eventually("the job placed", WAIT, || async {
        for (token, node) in [(&token0, &node0), (&token1, &node1)] {
            let (status, _) = f.post("/agent/poll", token, poll(node, json!([]))).await;
            assert_eq!(status, StatusCode::OK);
        }
        let (_, shown) = f.get(&format!("/jobs/{job_id}"), &admin).await;
        (shown["status"] == "DISPATCHING").then_some(())
    })
    .await;
    let sdk = f.server.state.secret.attempt_token(&job_id, 1);
    // The viewer reads a member's lines; nobody else does, and only
    // editors of vision stop the job.
    let (status, _) = f.get(&format!("/jobs/{job_id}/logs?rank=1"), &viewer).await;
    assert_eq!(status, StatusCode::OK);
    for token in [&outsider, &limited] {
        let (status, _) = f.get(&format!("/jobs/{job_id}/logs?rank=1"), token).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let (status, _) = f.get(&format!("/jobs/{job_id}/logs/full?rank=1"), token).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
    let (status, _) = f.get(&format!("/jobs/{job_id}/logs?rank=1"), &sdk).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "a job's sdk token reads no job routes"
    );
    people
        .cannot_cancel(&f, &format!("/jobs/{job_id}/cancel"), &sdk)
        .await;
    // The sdk token submits nothing, and logs only into its own run.
    let (status, _) = f
        .post("/jobs", &sdk, json!({"name": "x", "project": "vision", "command": ["true"], "resources": {"gpu": 1, "nodes": 2}}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let points =
        json!({"batch_id": "b1", "points": [{"key": "loss", "step": 0, "wall_time": 1.0, "value": 1.0}]});
    let (status, body) = f.post(&format!("/runs/{run_id}/metrics"), &sdk, points).await;
    assert!(status.is_success(), "{status} {body}");
    let (_, shown) = f.get(&format!("/jobs/{job_id}"), &admin).await;
    assert_eq!(shown["status"], "DISPATCHING", "nobody stopped it: {shown}");
}
