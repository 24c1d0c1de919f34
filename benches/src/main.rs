//! The `benches` binary: the harness of the `benches` library, re-executing itself (no
//! argument prefix) for its hidden server and client roles. `zeronode bench` is the same
//! harness behind the `zeronode` command.

use std::process::ExitCode;

fn main() -> ExitCode {
    match benches::Reexec::current_exe() {
        Ok(reexec) => benches::run(std::env::args_os(), reexec),
        Err(e) => {
            eprintln!("benches: cannot find this executable to start its roles: {e}");
            ExitCode::FAILURE
        }
    }
}
