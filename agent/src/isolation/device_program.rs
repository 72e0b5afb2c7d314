//! A job's device rules on cgroup v2, where `devices.deny` no longer
//! exists: an eBPF program of type `BPF_PROG_TYPE_CGROUP_DEVICE`, attached
//! to the job's cgroup, that the kernel asks at every open (or mknod) of a
//! device node by a process in it. It denies the NVIDIA GPUs the job was
//! not given and allows everything else. Written in eBPF assembly (rbpf's
//! assembler), loaded and attached with the `bpf` system call, as runc and
//! crun do; the program lives as long as the cgroup it is attached to.

use super::{FIRST_CONTROL_MINOR, NVIDIA_MAJOR};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `BPF_DEVCG_DEV_CHAR`: the low half of the context's `access_type`.
const CHARACTER_DEVICE: u32 = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;

/// The program for a job given `gpus`, in bytes the kernel loads. Its
/// context (r1) is `struct bpf_cgroup_dev_ctx { u32 access_type; u32 major;
/// u32 minor; }`, `access_type` being `access << 16 | device type`; it
/// answers 1 (allow) or 0 (deny, which the opener sees as EPERM).
pub fn assemble(gpus: &[u32]) -> Vec<u8> {
    let mut lines = vec![
        "ldxw r2, [r1+0]".to_string(),
        "and64 r2, 0xffff".into(),
        format!("jne r2, {CHARACTER_DEVICE}, ALLOW"),
        "ldxw r3, [r1+4]".into(),
        format!("jne r3, {NVIDIA_MAJOR}, ALLOW"),
        "ldxw r4, [r1+8]".into(),
        // The control devices every CUDA program opens.
        format!("jge r4, {FIRST_CONTROL_MINOR}, ALLOW"),
    ];
    lines.extend(gpus.iter().map(|gpu| format!("jeq r4, {gpu}, ALLOW")));
    lines.extend(["mov64 r0, 0", "exit"].map(String::from));
    // ALLOW: a jump's offset counts the instructions after it.
    let allow = lines.len();
    lines.extend(["mov64 r0, 1", "exit"].map(String::from));
    let source: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(at, line)| {
            if at < allow {
                line.replace("ALLOW", &format!("+{}", allow - at - 1))
            } else {
                line.clone()
            }
        })
        .collect();
    rbpf::assembler::assemble(&source.join("\n")).expect("the device program assembles")
}

/// Loads the program for `gpus` (the kernel's verifier checks it).
pub fn load(gpus: &[u32]) -> std::io::Result<OwnedFd> {
    let program = assemble(gpus);
    let license = c"Apache-2.0";
    let attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: (program.len() / 8) as u32,
        insns: program.as_ptr() as u64,
        license: license.as_ptr() as u64,
        ..Default::default()
    };
    // SAFETY: `attr` points at `program` and `license`, both alive for the call.
    let fd = unsafe { bpf(BPF_PROG_LOAD, &attr) }?;
    // SAFETY: a descriptor the kernel just gave this process, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Attaches the program for `gpus` to the cgroup folder `cgroup`.
pub fn attach(cgroup: &Path, gpus: &[u32]) -> std::io::Result<()> {
    let program = load(gpus)?;
    let folder = std::fs::File::open(cgroup)?;
    let attr = ProgAttachAttr {
        target_fd: folder.as_raw_fd() as u32,
        attach_bpf_fd: program.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        ..Default::default()
    };
    // SAFETY: `attr` holds two open descriptors; the kernel keeps its own
    // reference to the program once attached.
    unsafe { bpf(BPF_PROG_ATTACH, &attr) }?;
    Ok(())
}

/// The leading fields of `union bpf_attr` for `BPF_PROG_LOAD`; the kernel
/// takes the ones it is given and zero for the rest.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
}

/// `union bpf_attr` for `BPF_PROG_ATTACH`.
#[repr(C)]
#[derive(Default)]
struct ProgAttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

/// The `bpf` system call with `attr` of its command.
///
/// # Safety
/// The pointers inside `attr` must be valid for the call.
unsafe fn bpf<T>(command: libc::c_long, attr: &T) -> std::io::Result<libc::c_int> {
    // SAFETY: the caller vouches for `attr`'s pointers; its size is its own.
    let result = unsafe { libc::syscall(libc::SYS_bpf, command, attr as *const T, size_of::<T>()) };
    if result < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(result as libc::c_int)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the program answers for a device, run in rbpf's interpreter.
    fn allows(gpus: &[u32], character: bool, major: u32, minor: u32) -> bool {
        let program = assemble(gpus);
        let device_type = if character { CHARACTER_DEVICE } else { 1 };
        // Read and write access (BPF_DEVCG_ACC_READ | BPF_DEVCG_ACC_WRITE).
        let access_type = (6 << 16) | device_type;
        let mut context = [access_type, major, minor]
            .iter()
            .flat_map(|field| field.to_ne_bytes())
            .collect::<Vec<u8>>();
        let vm = rbpf::EbpfVmRaw::new(Some(&program)).unwrap();
        match vm.execute_program(&mut context).unwrap() {
            0 => false,
            1 => true,
            other => panic!("the program answered {other}"),
        }
    }

    #[test]
    fn a_job_opens_its_own_gpus_and_the_control_devices_only() {
        let gpus = [1, 3];
        for minor in 0..8 {
            assert_eq!(
                allows(&gpus, true, NVIDIA_MAJOR, minor),
                gpus.contains(&minor),
                "nvidia{minor}"
            );
        }
        for control in [FIRST_CONTROL_MINOR, 255] {
            assert!(allows(&gpus, true, NVIDIA_MAJOR, control));
        }
        // A job without GPUs opens none, and everything else stays open.
        assert!(!allows(&[], true, NVIDIA_MAJOR, 0));
        assert!(allows(&[], true, 1, 3), "/dev/null");
        assert!(
            allows(&[], false, NVIDIA_MAJOR, 0),
            "a block device with the same numbers"
        );
    }
}
