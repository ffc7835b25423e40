//! CPU time and peak memory of this process or thread, from procfs, for reports.

use std::fs;

/// User and system CPU time in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// User-mode time.
    pub user_us: u64,
    /// Kernel-mode time.
    pub sys_us: u64,
}

impl CpuTimes {
    /// `self - earlier`, saturating.
    pub fn since(self, earlier: CpuTimes) -> CpuTimes {
        CpuTimes {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
        }
    }
}

fn parse_stat(text: &str) -> Option<CpuTimes> {
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after "state".
    let hz = rustix::param::clock_ticks_per_second().max(1);
    let user: u64 = f.get(11)?.parse().ok()?;
    let sys: u64 = f.get(12)?.parse().ok()?;
    Some(CpuTimes { user_us: user * 1_000_000 / hz, sys_us: sys * 1_000_000 / hz })
}

/// CPU time of the whole process so far.
pub fn process() -> CpuTimes {
    fs::read_to_string("/proc/self/stat").ok().as_deref().and_then(parse_stat).unwrap_or_default()
}

/// CPU time of the calling thread so far.
pub fn thread() -> CpuTimes {
    fs::read_to_string("/proc/thread-self/stat").ok().as_deref().and_then(parse_stat).unwrap_or_default()
}

/// Peak resident set size of this process in bytes (VmHWM).
pub fn peak_rss() -> u64 {
    let Ok(s) = fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line = "123 (a b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0";
        let t = parse_stat(line).unwrap();
        let hz = rustix::param::clock_ticks_per_second();
        assert_eq!(t.user_us, 250 * 1_000_000 / hz);
        assert_eq!(t.sys_us, 50 * 1_000_000 / hz);
    }

    #[test]
    fn burning_cpu_shows_up_and_memory_is_reported() {
        let before = thread();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(60) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let used = thread().since(before);
        assert!(used.user_us + used.sys_us > 0, "{used:?}");
        assert!(peak_rss() > 0);
    }
}
