//! The benchmark session's state machines (`ServerMachine`, `ClientMachine`) driven by structured
//! sequences of operations and frames, checked against the protocol's phase table and serde
//! (see `src/bench_model.rs`). `bench_session` feeds them raw bytes; this target reaches the
//! deep phases (admitted, running, stopping) with well-formed and mangled documents.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_fuzz::bench_model::{Harness, Ops};

fuzz_target!(|ops: Ops| {
    Harness::run(&ops.0);
});
