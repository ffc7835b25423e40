//! Waiting for ssh to exit, with a deadline, without polling: a pidfd (Linux 5.3+) becomes
//! readable when its process exits, so the wait is one `poll` on it. (The engine's `proc` does
//! the same for its children; this crate does not depend on the engine.)

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How `child` exited, if it did within `limit` (it is neither killed nor reaped otherwise).
pub(crate) fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let deadline = Instant::now() + limit;
    let pidfd = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .map(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()));
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) => {}
            Err(_) => return None,
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // Without a pidfd (an old kernel) there is no bounded wait that does not poll: say it
        // did not exit.
        let Some(Ok(fd)) = &pidfd else { return None };
        if left.is_zero() {
            return None;
        }
        let ts = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        let _ = rustix::event::poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&ts));
    }
}
