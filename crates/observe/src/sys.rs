//! The only unsafe code in numaplace: thin wrappers over three Linux
//! system calls that no safe crate in the lock file offers (`move_pages`
//! in particular has no wrapper in `libc`'s safe surface or in `nix`).
//! Each wrapper owns its buffers, passes their exact lengths, and turns
//! the C return convention into `io::Result`.
#![allow(unsafe_code)]

use numaplace_topo::CpuSet;
use std::io;

/// The largest CPU number `cpu_set_t` can hold.
const SET_BITS: usize = 1024;

/// The CPUs a thread may run on (`sched_getaffinity`).
pub fn get_affinity(tid: u32) -> io::Result<CpuSet> {
    // SAFETY: cpu_set_t is plain bits; zeroed is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live, writable cpu_set_t and the size passed is
    // its exact size, so the kernel writes only inside it.
    let rc = unsafe { libc::sched_getaffinity(tid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = CpuSet::new();
    for cpu in 0..SET_BITS {
        // SAFETY: cpu < 1024, the bit width of cpu_set_t.
        if unsafe { libc::CPU_ISSET(cpu, &set) } {
            out.insert(cpu as u32);
        }
    }
    Ok(out)
}

/// Restricts a thread to `cpus` (`sched_setaffinity`).
pub fn set_affinity(tid: u32, cpus: &CpuSet) -> io::Result<()> {
    // SAFETY: as in `get_affinity`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus.iter() {
        let cpu = cpu as usize;
        if cpu >= SET_BITS {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} beyond cpu_set_t")));
        }
        // SAFETY: cpu < 1024 checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed; the kernel
    // only reads it.
    let rc = unsafe { libc::sched_setaffinity(tid as libc::pid_t, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `move_pages(2)` on another process with `MPOL_MF_MOVE` (pages mapped
/// only by that process). With `node` None it only reports where each
/// page is. Returns one status per page: a node id, or a negative errno
/// (`-ENOENT` for a page not present, `-EACCES` for a shared page).
pub fn move_pages(pid: u32, pages: &[u64], node: Option<u32>) -> io::Result<Vec<i32>> {
    let addrs: Vec<*mut libc::c_void> = pages.iter().map(|&a| a as usize as *mut libc::c_void).collect();
    let nodes: Vec<libc::c_int> = node.map(|n| vec![n as libc::c_int; pages.len()]).unwrap_or_default();
    // Not a node nor an errno: a page the kernel leaves unreported (it
    // returns how many pages it did not migrate and writes no status for
    // the batch that failed) never counts as moved to node 0.
    let mut status: Vec<libc::c_int> = vec![libc::c_int::MIN; pages.len()];
    let nodes_ptr = if node.is_some() { nodes.as_ptr() } else { std::ptr::null() };
    const MPOL_MF_MOVE: libc::c_int = 1 << 1;
    // SAFETY: `addrs`, `nodes` (when non-null) and `status` each hold
    // exactly `pages.len()` elements and outlive the call; the addresses
    // are only interpreted in the target process's address space, never
    // dereferenced here.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            pid as libc::c_long,
            pages.len() as libc::c_ulong,
            addrs.as_ptr(),
            nodes_ptr,
            status.as_mut_ptr(),
            MPOL_MF_MOVE as libc::c_long,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(status)
}
