//! Builds the libzmq 4.3.4 that `zeromq-src` ships, as the published zmq-sys 0.12 does, but
//! with libsodium (built by `libsodium-sys-stable`) so that CURVE is compiled in.
//!
//! The published build calls `with_libsodium(None)`, which leaves libzmq without CURVE
//! (`zmq_has("curve") == 0`). Here the libsodium location comes from the `links = "sodium"`
//! metadata of `libsodium-sys-stable`: cargo passes its `cargo:lib=` and `cargo:include=` lines
//! to this script as DEP_SODIUM_LIB and DEP_SODIUM_INCLUDE.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PROFILE");
    println!("cargo:rerun-if-env-changed=DEP_SODIUM_LIB");
    println!("cargo:rerun-if-env-changed=DEP_SODIUM_INCLUDE");

    let lib = dep_path("DEP_SODIUM_LIB");
    let include = dep_path("DEP_SODIUM_INCLUDE");

    // zeromq-src prints its libsodium search path with `{:?}` (quoted), which the linker
    // cannot use; give the plain one too. It also asks for `static=sodium`, the archive
    // libsodium-sys-stable installed in `lib`.
    println!("cargo:rustc-link-search=native={}", lib.display());

    // This crate is a path dependency now, so cargo shows every `cargo:warning` of its build,
    // including gcc's warnings about libzmq's own C++ (unused parameters, fall-throughs):
    // noise on everyone's first build that nobody here can act on. `-w` silences them; the
    // flags a user set are kept in front.
    let mut cxxflags = env::var("CXXFLAGS").unwrap_or_default();
    cxxflags.push_str(" -w");
    env::set_var("CXXFLAGS", cxxflags.trim_start());

    // The shim first: its archive must come before libzmq's on the link line, since it
    // calls into libzmq (see shim/external.cpp).
    println!("cargo:rerun-if-changed=shim/external.cpp");
    cc::Build::new()
        .cpp(true)
        .file("shim/external.cpp")
        .compile("zeronode_zmq_shim");
    // Reaches dependents' build scripts as DEP_ZMQ_MSG_INIT_EXTERNAL (`links = "zmq"`): the
    // transport uses the shim only when this libzmq has it.
    println!("cargo:msg_init_external=1");

    zeromq_src::Build::new()
        .with_libsodium(Some(zeromq_src::LibLocation::new(lib, include)))
        .build();
}

fn dep_path(name: &str) -> PathBuf {
    match env::var_os(name) {
        Some(path) => PathBuf::from(path),
        None => panic!(
            "{} is not set: libsodium-sys-stable should have exported it \
             (is it a [dependencies] entry of this crate?)",
            name
        ),
    }
}
