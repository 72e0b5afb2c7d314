//! A real Slurm cluster for tests: Debian's `slurm-wlm` and `munge`,
//! started in a temporary directory with a generated `slurm.conf`: one node,
//! or several (`start_nodes`), each its own `slurmd` on its own loopback
//! address (127.0.0.1, 127.0.0.2, …) and port.
//! `munged` runs as the `munge` user and `slurmctld` as the `slurm` user
//! (through `runuser` when the tests run as root); each `slurmd` runs as the
//! test's user, as it must to start jobs. Each node offers two GPUs through
//! GRES, declared on character devices made here, so no GPU is needed.
//! The tests must run as root: slurmd starts each job as its submitter.
//! Ports are free ones, so clusters of parallel tests never meet. Slurm's
//! client commands find this cluster through `SLURM_CONF`: pass
//! [`Slurm::env`] to every process that runs them. Everything stops when
//! the value is dropped.

use crate::{free_port, is_root};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// GPUs each node of the test cluster has.
pub const GPUS: u32 = 2;

pub struct Slurm {
    dir: tempfile::TempDir,
    /// The nodes' names in `slurm.conf`.
    pub nodes: Vec<String>,
}

impl Slurm {
    /// A one-node cluster: see [`Slurm::start_nodes`].
    pub fn start() -> Slurm {
        Slurm::start_nodes(1)
    }

    /// Starts munged, slurmctld and a slurmd per node, and waits until
    /// every node is idle. Panics with the reason when Slurm is not
    /// installed (`./scripts/test.sh` installs it).
    pub fn start_nodes(count: usize) -> Slurm {
        assert!(
            is_root(),
            "Slurm tests run as root: slurmd starts jobs as their submitting user"
        );
        for program in ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"] {
            assert!(
                Path::new(program).exists(),
                "{program} is missing: `apt-get install slurm-wlm munge` (./scripts/test.sh does)"
            );
        }
        let dir = tempfile::Builder::new()
            .prefix("gpuplane-slurm-")
            .tempdir()
            .unwrap();
        let slurm = Slurm {
            dir,
            nodes: (1..=count).map(|n| format!("gpuplane-node{n}")).collect(),
        };
        let root = slurm.dir.path();
        // Every user the daemons run as must reach into the directory.
        set_mode(root, 0o755);
        slurm.start_munge();
        for sub in ["state", "log", "spool", "dev"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        give(&root.join("state"), "slurm");
        give(&root.join("log"), "slurm");
        let mut gres = String::new();
        for (n, node) in slurm.nodes.iter().enumerate() {
            std::fs::create_dir_all(root.join("spool").join(node)).unwrap();
            let first = n as u32 * GPUS;
            for index in first..first + GPUS {
                // Character devices, as gres.conf insists; they are /dev/null's.
                let device = root.join(format!("dev/gpu{index}"));
                let status = Command::new("mknod")
                    .arg(&device)
                    .args(["c", "1", "3"])
                    .status()
                    .unwrap();
                assert!(status.success(), "mknod {}", device.display());
            }
            gres.push_str(&format!(
                "NodeName={node} Name=gpu File={}/dev/gpu[{first}-{}] AutoDetect=off\n",
                root.display(),
                first + GPUS - 1
            ));
        }
        let controller_port = free_port();
        std::fs::write(root.join("slurm.conf"), slurm.config(controller_port)).unwrap();
        std::fs::write(root.join("gres.conf"), gres).unwrap();
        slurm.run_as("slurm", "/usr/sbin/slurmctld", &["-i"]);
        for node in &slurm.nodes {
            slurm.run_as("", "/usr/sbin/slurmd", &["-N", node]);
        }
        slurm.wait_until_idle();
        slurm
    }

    /// `SLURM_CONF` for Slurm's client commands (sbatch, squeue, scontrol, scancel, sinfo).
    pub fn env(&self) -> (&'static str, PathBuf) {
        ("SLURM_CONF", self.dir.path().join("slurm.conf"))
    }

    /// The daemons' logs, for a failing test's message.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        let nodes = self.nodes.iter().map(|node| format!("spool/slurmd-{node}.log"));
        let names = ["log/slurmctld.log".to_string(), "munge/munged.log".to_string()];
        for name in names.into_iter().chain(nodes) {
            let log = std::fs::read_to_string(self.dir.path().join(&name)).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            text.push_str(&format!("== {name}\n"));
            for line in tail.into_iter().rev() {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }

    /// A Slurm client command against this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        let (name, value) = self.env();
        command.env(name, value);
        command
    }

    fn munge_dir(&self) -> PathBuf {
        self.dir.path().join("munge")
    }

    fn start_munge(&self) {
        let dir = self.munge_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let mut key = vec![0u8; 1024];
        std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom").unwrap(), &mut key).unwrap();
        std::fs::write(dir.join("munge.key"), key).unwrap();
        set_mode(&dir.join("munge.key"), 0o400);
        give(&dir.join("munge.key"), "munge");
        give(&dir, "munge");
        // munged wants its socket's directory reachable by every client.
        set_mode(&dir, 0o711);
        let path = |name: &str| dir.join(name).display().to_string();
        self.run_as(
            "munge",
            "/usr/sbin/munged",
            &[
                &format!("--key-file={}", path("munge.key")),
                &format!("--socket={}", path("munge.sock")),
                &format!("--pid-file={}", path("munged.pid")),
                &format!("--log-file={}", path("munged.log")),
                &format!("--seed-file={}", path("munged.seed")),
                "--force",
            ],
        );
    }

    fn config(&self, controller_port: u16) -> String {
        let root = self.dir.path().display();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Each slurmd listens on every address, so each has its own port.
        let nodes: String = self
            .nodes
            .iter()
            .enumerate()
            .map(|(n, node)| {
                format!(
                    "NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.{} Port={} CPUs={cpus} \
                     RealMemory=1000 Gres=gpu:{GPUS} State=UNKNOWN\n",
                    n + 1,
                    free_port()
                )
            })
            .collect();
        format!(
            "ClusterName=gpuplane-test
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
AuthInfo=socket={root}/munge/munge.sock
CredType=cred/munge
SlurmctldPort={controller_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/state/slurmctld.pid
SlurmdPidFile={root}/spool/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/spool/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
{nodes}PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"
        )
    }

    /// Runs a daemon (it forks into the background) as `user` when we are root.
    fn run_as(&self, user: &str, program: &str, args: &[&str]) {
        let mut command = if !user.is_empty() {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        let (name, value) = self.env();
        let output = command.args(args).env(name, value).output().unwrap();
        assert!(
            output.status.success(),
            "{program} failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.logs()
        );
    }

    fn wait_until_idle(&self) {
        let began = Instant::now();
        loop {
            let output = self
                .command("sinfo")
                .args(["--noheader", "--Node", "--format=%t"])
                .output()
                .unwrap();
            let state = String::from_utf8_lossy(&output.stdout).trim().to_string();
            if state.lines().count() == self.nodes.len() && state.lines().all(|line| line == "idle") {
                return;
            }
            assert!(
                began.elapsed() < Duration::from_secs(30),
                "the Slurm nodes are not idle after 30 s (sinfo: {state:?}, {})\n{}",
                String::from_utf8_lossy(&output.stderr).trim(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn pid(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(file))
            .ok()
            .map(|pid| pid.trim().to_string())
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let (name, value) = self.env();
        // Jobs first, so no job outlives its cluster.
        let _ = Command::new("scancel")
            .args(["--full", "--signal=KILL", "--user=root"])
            .env(name, &value)
            .output();
        let nodes = self.nodes.iter().map(|node| format!("spool/slurmd-{node}.pid"));
        let daemons = ["state/slurmctld.pid".to_string(), "munge/munged.pid".to_string()];
        for file in nodes.chain(daemons) {
            if let Some(pid) = self.pid(&file) {
                let _ = Command::new("kill").arg(pid).status();
            }
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Makes `user` own `path`.
fn give(path: &Path, user: &str) {
    let status = Command::new("chown")
        .arg(format!("{user}:"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "chown {user} {}", path.display());
}
