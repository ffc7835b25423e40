//! What one TCP connection keeps in flight under the kernel's buffer limits: the one model that
//! `doctor`'s ceiling and `cp`'s stream count share.
//!
//! The receiver advertises its buffer times the payload share of what it holds (since Linux 6.6
//! measured from the arriving packets, about two thirds for 1500-byte frames; before, half with
//! the default `tcp_adv_win_scale`); the sender keeps at most its buffer times the payload share
//! of its queued packets in flight (large offloaded packets, so most of it). Measured on this
//! project's VM (kernel 6.18, 1 Gbit/s × 100 ms path, one iperf3 stream): `tcp_rmem` 6 MiB with
//! `tcp_wmem` 4 MiB carried 3.52 MB in flight (0.84 of the send buffer), with `tcp_wmem` 6 MiB
//! 4.36 MB (0.69 of the receive buffer).

/// Share of `net.ipv4.tcp_rmem`'s maximum a receiver offers as window.
pub const RECEIVE_WINDOW_SHARE: f64 = 0.66;
/// Share of `net.ipv4.tcp_wmem`'s maximum a sender keeps in flight.
pub const SEND_WINDOW_SHARE: f64 = 0.85;

/// Bytes one connection can keep in flight with receive buffer maximum `rmem_max` and send
/// buffer maximum `wmem_max` (either unknown: the other alone; both: `None`).
pub fn usable_window(rmem_max: Option<u64>, wmem_max: Option<u64>) -> Option<f64> {
    let r = rmem_max.map(|r| r as f64 * RECEIVE_WINDOW_SHARE);
    let w = wmem_max.map(|w| w as f64 * SEND_WINDOW_SHARE);
    match (r, w) {
        (Some(r), Some(w)) => Some(r.min(w)),
        (r, w) => r.or(w),
    }
}

/// Buffer maximum that lets one connection keep `bdp` bytes in flight, on both sides.
pub fn buffer_for(bdp: f64) -> f64 {
    bdp / RECEIVE_WINDOW_SHARE.min(SEND_WINDOW_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smaller_side_limits_and_the_measurements_are_reproduced() {
        let mib = 1u64 << 20;
        // The two measurements above, within 5 %.
        let w = usable_window(Some(6 * mib), Some(4 * mib)).unwrap();
        assert!((w / 3.52e6 - 1.0).abs() < 0.05, "{w}");
        let w = usable_window(Some(6 * mib), Some(6 * mib)).unwrap();
        assert!((w / 4.36e6 - 1.0).abs() < 0.1, "{w}");
        assert_eq!(usable_window(None, None), None);
        assert_eq!(usable_window(Some(mib), None), Some(mib as f64 * RECEIVE_WINDOW_SHARE));
        assert!(buffer_for(1e6) > 1e6 / SEND_WINDOW_SHARE);
        assert!(usable_window(Some(buffer_for(1e6) as u64 + 1), Some(buffer_for(1e6) as u64 + 1)).unwrap() >= 1e6);
    }
}
