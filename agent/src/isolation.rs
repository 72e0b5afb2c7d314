//! Whether a job can reach GPUs it was not given. `CUDA_VISIBLE_DEVICES`
//! alone is advisory: a job can unset it. Where the agent runs as root,
//! each process job runs in its own cgroup (`CGROUPS/gpuplane/JOB-ATTEMPT`)
//! whose device rules deny every NVIDIA GPU device (`/dev/nvidiaN`,
//! character major 195) but its own; the control devices (`nvidiactl`,
//! `nvidia-modeset`, `nvidia-uvm`) stay open. On cgroup v2 the rules are an
//! eBPF program (`device_program`), on cgroup v1 the devices controller's
//! `devices.deny`. The shim joins the job to it before the job's program
//! starts and removes it when the job ends. Elsewhere the node says its
//! isolation is advisory, and why.

mod device_program;

use std::ffi::CStr;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The character major of `/dev/nvidia0`, `/dev/nvidia1`, …
pub const NVIDIA_MAJOR: u32 = 195;
/// `nvidia-modeset` (254) and `nvidiactl` (255): every CUDA program opens them.
const FIRST_CONTROL_MINOR: u32 = 254;

#[derive(Debug, Clone)]
pub enum Isolation {
    /// cgroup v2: jobs' cgroups are made under this folder, each with its
    /// device program.
    CgroupV2(PathBuf),
    /// cgroup v1: jobs' device cgroups are made under this folder, each
    /// with its `devices.deny` rules.
    CgroupV1(PathBuf),
    /// Why a job's GPUs are advisory on this host.
    Advisory(String),
}

impl Isolation {
    /// What this host allows the agent. `wanted` is `--device-cgroup`:
    /// `auto` takes cgroup v2 where the kernel loads device programs, then
    /// the cgroup v1 devices controller; `v2` or `v1` only that one.
    pub fn detect(wanted: &str) -> Isolation {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Isolation::Advisory(
                "the agent does not run as root, so it cannot give each job its own device cgroup".into(),
            );
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let v2 = || -> Result<PathBuf, String> {
            let mount = cgroup2_mount(&mounts).ok_or("no cgroup v2 is mounted")?;
            device_program::load(&[])
                .map_err(|error| format!("the kernel does not load a cgroup v2 device program: {error}"))?;
            make_root(&mount)
        };
        let v1 = || -> Result<PathBuf, String> {
            let mount = devices_mount(&mounts).ok_or("no cgroup v1 devices controller is mounted")?;
            make_root(&mount)
        };
        let found = match wanted {
            "v2" => v2().map(Isolation::CgroupV2),
            "v1" => v1().map(Isolation::CgroupV1),
            _ => v2().map(Isolation::CgroupV2).or_else(|v2_why| {
                v1().map(Isolation::CgroupV1)
                    .map_err(|v1_why| format!("{v2_why}, and {v1_why}"))
            }),
        };
        found.unwrap_or_else(Isolation::Advisory)
    }

    /// How the node shows it: `cgroup: …` or `advisory: WHY`.
    pub fn describe(&self) -> String {
        match self {
            Isolation::CgroupV2(_) => {
                "cgroup: each job opens only its own GPUs' devices (cgroup v2, eBPF)".into()
            }
            Isolation::CgroupV1(_) => "cgroup: each job opens only its own GPUs' devices (cgroup v1)".into(),
            Isolation::Advisory(why) => format!("advisory: {why}"),
        }
    }

    /// Makes the cgroup an attempt's process job runs in, with its rules
    /// (`None` when isolation is advisory here).
    pub fn job_cgroup(&self, job_id: &str, attempt: i64, gpus: &[u32]) -> std::io::Result<Option<PathBuf>> {
        let (Isolation::CgroupV2(root) | Isolation::CgroupV1(root)) = self else {
            return Ok(None);
        };
        let dir = root.join(format!("{job_id}-{attempt}"));
        std::fs::create_dir_all(&dir)?;
        let ruled = match self {
            Isolation::CgroupV2(_) => device_program::attach(&dir, gpus),
            _ => deny_devices(&dir, gpus),
        };
        if let Err(error) = ruled {
            remove(&dir);
            return Err(error);
        }
        Ok(Some(dir))
    }
}

/// cgroup v1: `devices.deny` rules for the NVIDIA GPUs not in `gpus`.
fn deny_devices(dir: &Path, gpus: &[u32]) -> std::io::Result<()> {
    let mut deny = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("devices.deny"))?;
    // One rule a write: the kernel reads one per write.
    for minor in (0..FIRST_CONTROL_MINOR).filter(|minor| !gpus.contains(minor)) {
        deny.write_all(format!("c {NVIDIA_MAJOR}:{minor} rwm").as_bytes())?;
    }
    Ok(())
}

/// The folder the jobs' cgroups are made in, under a hierarchy's mount.
fn make_root(mount: &Path) -> Result<PathBuf, String> {
    let root = mount.join("gpuplane");
    std::fs::create_dir_all(&root).map_err(|error| format!("cannot create {}: {error}", root.display()))?;
    Ok(root)
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

/// Where this host mounts cgroup v2, if it does.
pub fn cgroup2_mount_point() -> Option<PathBuf> {
    cgroup2_mount(&std::fs::read_to_string("/proc/self/mountinfo").ok()?)
}

/// Where the cgroup v1 devices controller is mounted, if it is.
fn devices_mount(mountinfo: &str) -> Option<PathBuf> {
    mount_point(mountinfo, |kind, options| {
        kind == "cgroup" && options.split(',').any(|option| option == "devices")
    })
}

/// Where cgroup v2 is mounted (all of it on a v2 host, `unified` on a
/// hybrid one), if it is.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mount_point(mountinfo, |kind, _| kind == "cgroup2")
}

/// The mount point of the first `/proc/self/mountinfo` line whose
/// filesystem type and super options `wanted` accepts.
fn mount_point(mountinfo: &str, wanted: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split_whitespace();
        let (kind, _source, options) = (after.next()?, after.next()?, after.next()?);
        if !wanted(kind, options) {
            return None;
        }
        Some(PathBuf::from(before.split_whitespace().nth(4)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup_hierarchies_are_found_among_the_mounts() {
        let mountinfo = "\
25 30 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
36 25 0:32 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices
37 25 0:33 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory";
        assert_eq!(
            devices_mount(mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/devices"))
        );
        assert_eq!(
            cgroup2_mount(mountinfo),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let v2_only = "31 25 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw";
        assert_eq!(devices_mount(v2_only), None);
        assert_eq!(cgroup2_mount(v2_only), Some(PathBuf::from("/sys/fs/cgroup")));
    }
}
