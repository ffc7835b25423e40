//! Waiting for a child process to exit, with a deadline, without polling: a pidfd (Linux 5.3+)
//! becomes readable when its process exits, so the wait is one `poll` on it (issue 30: no
//! sleep-polling loops). And learning, the same way, that nobody reads this process's standard
//! output or error any more ([`on_readers_gone`]).

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Call `gone` once the reader of this process's standard output or error goes away (`| head
/// -1` done reading): a pipe's writer end reports POLLERR then, so one thread waits in `poll`
/// for it, for as long as the process lives. Only pipes are watched (a terminal or a file has no
/// reader to lose); with neither a pipe, or when `poll` cannot watch them, `gone` is never called
/// (a write will tell).
pub fn on_readers_gone(gone: impl FnOnce() + Send + 'static) {
    use rustix::event::{poll, PollFd, PollFlags};
    use rustix::fs::{fstat, FileType};
    use std::os::fd::AsFd;
    let is_pipe =
        |fd: &dyn AsFd| fstat(fd.as_fd()).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Fifo);
    let (o, e) = (std::io::stdout(), std::io::stderr());
    let (watch_out, watch_err) = (is_pipe(&o), is_pipe(&e));
    if !watch_out && !watch_err {
        return;
    }
    std::thread::spawn(move || {
        // No events asked: a pipe's writer end reports POLLERR once it has no reader left.
        let mut fds = Vec::new();
        if watch_out {
            fds.push(PollFd::new(&o, PollFlags::empty()));
        }
        if watch_err {
            fds.push(PollFd::new(&e, PollFlags::empty()));
        }
        loop {
            match poll(&mut fds, None) {
                Ok(_) if fds.iter().any(|f| f.revents().intersects(PollFlags::ERR | PollFlags::HUP)) => {
                    gone();
                    return;
                }
                Err(rustix::io::Errno::INTR) | Ok(_) => {}
                Err(_) => return, // cannot watch: a write will tell
            }
        }
    });
}

/// How `child` exited, if it did within `limit` (it is neither killed nor reaped otherwise).
pub fn exit_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
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
        let Some(Ok(fd)) = &pidfd else {
            // No pidfd (an old kernel): one wait of the whole limit's length is all we can do
            // without polling, and it is not bounded; say it did not exit.
            return None;
        };
        if left.is_zero() {
            return None;
        }
        let ts = Timespec { tv_sec: left.as_secs() as i64, tv_nsec: i64::from(left.subsec_nanos()) };
        let _ = rustix::event::poll(&mut [PollFd::new(fd, PollFlags::IN)], Some(&ts));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn returns_at_the_exit_or_after_the_limit() {
        let mut quick = Command::new("true").spawn().unwrap();
        assert!(exit_within(&mut quick, Duration::from_secs(600)).is_some_and(|s| s.success()));
        let mut slow = Command::new("sleep").arg("600").spawn().unwrap();
        assert!(exit_within(&mut slow, Duration::from_millis(1)).is_none(), "still running");
        slow.kill().unwrap();
        assert!(exit_within(&mut slow, Duration::from_secs(600)).is_some(), "killed: it exits");
    }
}
