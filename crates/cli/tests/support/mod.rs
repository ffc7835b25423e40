//! Shared helpers of the integration tests.
#![allow(dead_code)] // each test binary uses a part

pub mod sshlab;
