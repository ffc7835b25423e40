//! `Tracker` driven by a sequence of operations and checked against a reference model
//! (see `src/tracker_model.rs`): it must never panic, never accept what it must refuse, complete
//! every file exactly once, and keep `open_files()` within `MAX_OPEN_FILES`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use linerate_fuzz::tracker_model::{Harness, Ops};

fuzz_target!(|ops: Ops| {
    Harness::run(&ops.0);
});
