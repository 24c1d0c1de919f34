//! Tells the crate whether its libzmq exports `zeronode_msg_init_external` (the workspace's
//! patched zmq-sys in `third_party/zmq-sys` does; the published one does not).
//!
//! zmq-sys declares `links = "zmq"`, so the `cargo:msg_init_external=1` line its build script
//! prints reaches this script as `DEP_ZMQ_MSG_INIT_EXTERNAL`. With it, pooled send buffers
//! carry libzmq's message header themselves (no allocation per frame sent); without it (a
//! project that uses this crate without the workspace's patch) they are handed over with
//! `zmq_msg_init_data`, as before, and everything else is the same.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(zmq_msg_init_external)");
    println!("cargo:rerun-if-env-changed=DEP_ZMQ_MSG_INIT_EXTERNAL");
    if std::env::var_os("DEP_ZMQ_MSG_INIT_EXTERNAL").is_some_and(|v| v == "1") {
        println!("cargo:rustc-cfg=zmq_msg_init_external");
    }
}
