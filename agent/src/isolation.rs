//! Whether a job can reach GPUs it was not given. `CUDA_VISIBLE_DEVICES`
//! alone is advisory: a job can unset it. Where the agent runs as root
//! with the cgroup v1 devices controller, each process job runs in its own
//! cgroup (`DEVICES/gpuplane/JOB-ATTEMPT`) whose rules deny every NVIDIA GPU
//! device (`/dev/nvidiaN`, character major 195) but its own; the control
//! devices (`nvidiactl`, `nvidia-modeset`, `nvidia-uvm`) stay open. The shim
//! joins the job to it before the job's program starts and removes it when
//! the job ends. Elsewhere the node says its isolation is advisory, and why.

use std::ffi::CStr;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The character major of `/dev/nvidia0`, `/dev/nvidia1`, …
pub const NVIDIA_MAJOR: u32 = 195;
/// `nvidia-modeset` (254) and `nvidiactl` (255): every CUDA program opens them.
const FIRST_CONTROL_MINOR: u32 = 254;

#[derive(Debug, Clone)]
pub enum Isolation {
    /// Jobs' device cgroups are made under this folder.
    Devices(PathBuf),
    /// Why a job's GPUs are advisory on this host.
    Advisory(String),
}

impl Isolation {
    /// What this host allows the agent.
    pub fn detect() -> Isolation {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Isolation::Advisory(
                "the agent does not run as root, so it cannot give each job its own device cgroup".into(),
            );
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let Some(mount) = devices_mount(&mounts) else {
            let why = if mounts.lines().any(|line| fstype(line) == Some("cgroup2")) {
                "this host has cgroup v2 only, whose device rules need an eBPF program the agent does not load yet"
            } else {
                "no devices cgroup is mounted"
            };
            return Isolation::Advisory(why.into());
        };
        let root = mount.join("gpuplane");
        match std::fs::create_dir_all(&root) {
            Ok(()) => Isolation::Devices(root),
            Err(error) => Isolation::Advisory(format!("cannot create {}: {error}", root.display())),
        }
    }

    /// How the node shows it: `cgroup: …` or `advisory: WHY`.
    pub fn describe(&self) -> String {
        match self {
            Isolation::Devices(_) => "cgroup: each job opens only its own GPUs' devices".into(),
            Isolation::Advisory(why) => format!("advisory: {why}"),
        }
    }

    /// Makes the cgroup an attempt's process job runs in, with its rules
    /// (`None` when isolation is advisory here).
    pub fn job_cgroup(&self, job_id: &str, attempt: i64, gpus: &[u32]) -> std::io::Result<Option<PathBuf>> {
        let Isolation::Devices(root) = self else {
            return Ok(None);
        };
        let dir = root.join(format!("{job_id}-{attempt}"));
        std::fs::create_dir_all(&dir)?;
        let mut deny = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("devices.deny"))?;
        // One rule a write: the kernel reads one per write.
        for minor in (0..FIRST_CONTROL_MINOR).filter(|minor| !gpus.contains(minor)) {
            deny.write_all(format!("c {NVIDIA_MAJOR}:{minor} rwm").as_bytes())?;
        }
        Ok(Some(dir))
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs`. Async-signal-safe (no allocation): for `pre_exec`.
pub fn join(procs: &CStr) -> std::io::Result<()> {
    // SAFETY: a valid C string; the descriptor is closed on every path.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // "0": the writing process itself.
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if written == 1 { Ok(()) } else { Err(error) }
    }
}

/// Removes a job's cgroup once its processes are gone.
pub fn remove(dir: &Path) {
    if let Err(error) = std::fs::remove_dir(dir) {
        eprintln!("cannot remove the job's cgroup {}: {error}", dir.display());
    }
}

/// Where this host mounts the cgroup v1 devices controller, if it does.
pub fn devices_mount_point() -> Option<PathBuf> {
    devices_mount(&std::fs::read_to_string("/proc/self/mountinfo").ok()?)
}

/// A `/proc/self/mountinfo` line's filesystem type (after ` - `).
fn fstype(line: &str) -> Option<&str> {
    line.split(" - ").nth(1)?.split_whitespace().next()
}

/// Where the cgroup v1 devices controller is mounted, if it is.
fn devices_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split_whitespace();
        let (kind, _source, options) = (after.next()?, after.next()?, after.next()?);
        if kind != "cgroup" || !options.split(',').any(|option| option == "devices") {
            return None;
        }
        Some(PathBuf::from(before.split_whitespace().nth(4)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_devices_controller_is_found_among_the_mounts() {
        let mountinfo = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
36 25 0:32 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices
37 25 0:33 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
        assert_eq!(
            devices_mount(mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/devices"))
        );
        let v2_only = "31 25 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        assert_eq!(devices_mount(v2_only), None);
        assert_eq!(fstype(v2_only), Some("cgroup2"));
    }
}
