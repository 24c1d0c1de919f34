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
    let mut flags = String::from("-w");
    // zeromq-src writes an empty `platform.hpp` (the header CMake would generate from probes
    // of the system) and defines only a few macros itself, so on Linux libzmq lost what every
    // distribution's build of it has: the TCP keepalive options (ZMQ_TCP_KEEPALIVE and friends
    // were accepted and ignored), close-on-exec descriptors, accept4, named I/O threads. These
    // are the answers CMake's probes give on any Linux with glibc or musl. Not eventfd
    // signalling: measured slower for the transport (README.md).
    if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        for define in LINUX_PLATFORM {
            flags.push_str(" -D");
            flags.push_str(define);
        }
    }
    append_cxxflags(&flags);

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

/// What libzmq's CMake build writes into `platform.hpp` on Linux (glibc or musl): the system
/// facilities it probes for, all present on every Linux this builds for.
const LINUX_PLATFORM: &[&str] = &[
    "ZMQ_HAVE_LINUX",
    "ZMQ_IOTHREAD_POLLER_USE_EPOLL_CLOEXEC",
    "ZMQ_HAVE_SOCK_CLOEXEC",
    "ZMQ_HAVE_O_CLOEXEC",
    "HAVE_ACCEPT4",
    "ZMQ_HAVE_SO_KEEPALIVE",
    "ZMQ_HAVE_TCP_KEEPCNT",
    "ZMQ_HAVE_TCP_KEEPIDLE",
    "ZMQ_HAVE_TCP_KEEPINTVL",
    "ZMQ_HAVE_SO_PRIORITY",
    "ZMQ_HAVE_SO_BINDTODEVICE",
    "ZMQ_HAVE_SO_PEERCRED",
    "ZMQ_HAVE_IFADDRS",
    "HAVE_IF_NAMETOINDEX",
    "HAVE_CLOCK_GETTIME",
    "HAVE_FORK",
    "HAVE_MKDTEMP",
    "ZMQ_HAVE_NOEXCEPT",
    "ZMQ_HAVE_PTHREAD_SETNAME_2",
    "ZMQ_HAVE_PTHREAD_SET_AFFINITY",
];

/// Adds `flags` to the C++ flags `cc` will use for libzmq. `cc` reads only the first of these
/// variables that is set, so the flags go after whatever the user put there.
fn append_cxxflags(flags: &str) {
    let target = env::var("TARGET").unwrap_or_default();
    let kind = if env::var("HOST").ok().as_deref() == Some(target.as_str()) {
        "HOST"
    } else {
        "TARGET"
    };
    let candidates = [
        format!("CXXFLAGS_{}", target),
        format!("CXXFLAGS_{}", target.replace('-', "_")),
        format!("{}_CXXFLAGS", kind),
        String::from("CXXFLAGS"),
    ];
    for name in &candidates {
        println!("cargo:rerun-if-env-changed={}", name);
    }
    let chosen = candidates
        .iter()
        .find(|name| env::var_os(name.as_str()).is_some())
        .cloned()
        .unwrap_or_else(|| String::from("CXXFLAGS"));
    let mut value = env::var(&chosen).unwrap_or_default();
    value.push(' ');
    value.push_str(flags);
    env::set_var(&chosen, value.trim_start());
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
