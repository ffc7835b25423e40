//! The ssh start-up dialogue (`linerate_remote::Bootstrap`) driven by structured sequences of
//! the remote's output (raw bytes, or probe, run and announce lines, valid and mangled, split
//! anywhere), clock steps and an upload's progress, checked step by step (see
//! `src/remote_model.rs`): no panic, one end and nothing after it, deadlines kept exactly,
//! only the lines the dialogue allows written, the output it takes in capped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_fuzz::remote_model::{run, Ops};

fuzz_target!(|ops: Ops| {
    run(&ops);
});
