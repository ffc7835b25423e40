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

fn status_kb(field: &str) -> u64 {
    let Ok(s) = fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Peak resident set size of this process in bytes (VmHWM).
pub fn peak_rss() -> u64 {
    status_kb("VmHWM:")
}

/// Resident set size of this process now, in bytes (VmRSS).
pub fn rss() -> u64 {
    status_kb("VmRSS:")
}

/// Whole-machine CPU counters from the first line of /proc/stat, in clock ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineTimes {
    /// user + nice.
    pub user: u64,
    /// system.
    pub system: u64,
    /// idle + iowait.
    pub idle: u64,
    /// hardware interrupts.
    pub irq: u64,
    /// software interrupts.
    pub softirq: u64,
    /// steal (time a hypervisor gave to others).
    pub steal: u64,
    /// Cores (cpuN lines).
    pub cores: u32,
}

fn parse_proc_stat(text: &str) -> Option<MachineTimes> {
    let mut lines = text.lines();
    let first = lines.next()?;
    let f: Vec<u64> = first.strip_prefix("cpu ")?.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    let cores =
        text.lines().filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit)).count();
    Some(MachineTimes {
        user: at(0) + at(1),
        system: at(2),
        idle: at(3) + at(4),
        irq: at(5),
        softirq: at(6),
        steal: at(7),
        cores: cores as u32,
    })
}

/// The machine's CPU counters now.
pub fn machine() -> MachineTimes {
    fs::read_to_string("/proc/stat").ok().as_deref().and_then(parse_proc_stat).unwrap_or_default()
}

impl MachineTimes {
    /// Fractions of all cores spent in each state between `earlier` and `self`, plus this
    /// process's own CPU seconds over the same span.
    pub fn share_since(
        &self,
        earlier: &MachineTimes,
        proc_now: CpuTimes,
        proc_then: CpuTimes,
    ) -> linerate_proto::bench::CpuShare {
        let d = |a: u64, b: u64| a.saturating_sub(b) as f64;
        let user = d(self.user, earlier.user);
        let system = d(self.system, earlier.system);
        let idle = d(self.idle, earlier.idle);
        let irq = d(self.irq, earlier.irq);
        let softirq = d(self.softirq, earlier.softirq);
        let steal = d(self.steal, earlier.steal);
        let total = (user + system + idle + irq + softirq + steal).max(1.0);
        let p = proc_now.since(proc_then);
        linerate_proto::bench::CpuShare {
            user: user / total,
            system: system / total,
            softirq: softirq / total,
            irq: irq / total,
            idle: idle / total,
            steal: steal / total,
            cores: self.cores,
            process_user_s: p.user_us as f64 / 1e6,
            process_system_s: p.sys_us as f64 / 1e6,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_parses_into_shares_that_add_up() {
        let a = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0\ncpu1 50 0 25 400 25 0 0 0\n";
        let b = "cpu  200 0 100 1400 100 10 40 0 0 0\ncpu0 1\ncpu1 1\n";
        let (a, b) = (parse_proc_stat(a).unwrap(), parse_proc_stat(b).unwrap());
        assert_eq!(a.cores, 2);
        let s = b.share_since(&a, CpuTimes::default(), CpuTimes::default());
        // Deltas: user 100, system 50, idle 650, irq 10, softirq 40 of 850.
        assert!((s.user - 100.0 / 850.0).abs() < 1e-9, "{s:?}");
        assert!((s.softirq - 40.0 / 850.0).abs() < 1e-9);
        assert!((s.user + s.system + s.idle + s.irq + s.softirq + s.steal - 1.0).abs() < 1e-9);
    }

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
        // A known amount of work by the thread's own CPU clock, which only advances while it
        // runs: however busy the machine, 200 ms of it is 200 ms of CPU.
        let cpu_clock = || {
            let ts = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1000
        };
        let before = thread();
        let c0 = cpu_clock();
        let mut x = 0u64;
        let wall = std::time::Instant::now();
        while cpu_clock() - c0 < 200_000 && wall.elapsed() < std::time::Duration::from_secs(120) {
            for _ in 0..1000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let burnt = cpu_clock() - c0;
        assert!(burnt >= 200_000, "the thread got only {burnt} µs of CPU in 120 s");
        let used = thread().since(before);
        // /proc counts in clock ticks (10 ms at 100 Hz): allow two ticks either way.
        let tick = 1_000_000 / rustix::param::clock_ticks_per_second().max(1);
        let counted = used.user_us + used.sys_us;
        assert!(
            counted + 2 * tick >= burnt && counted <= burnt + 2 * tick,
            "counted {counted} µs for {burnt} µs of work ({used:?})"
        );
        assert!(peak_rss() > 0);
    }
}
