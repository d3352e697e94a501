//! `ebb`: build and run Ebbflow apps, hosted or native (see the `ebb_cli` crate).

fn main() {
    std::process::exit(ebb_cli::main())
}
