//! The open-file limit of a test that opens thousands of connections. Shared by the
//! transport, node and cli tests (the latter two include this file by its path).

#![allow(unreachable_pub)]

/// Raises the soft limit on open files to `wanted` if it is lower (CI often starts at
/// 1,024), within the hard limit.
pub fn enough_descriptors(wanted: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current.is_some_and(|soft| soft < wanted) {
        let raised = Rlimit {
            current: Some(limit.maximum.map_or(wanted, |hard| hard.min(wanted))),
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, raised).expect("raise RLIMIT_NOFILE");
    }
}
