//! `Tracker`'s `-H` and `-S` rules (link targets, further names, holes) driven by a sequence of
//! operations, with the invariants of `src/links_model.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_fuzz::links_model::{run, Ops};

fuzz_target!(|ops: Ops| {
    run(&ops.0);
});
