//! Connections one source holds on a listener (`connections_per_source_max`): one client
//! opening connections as fast as it can fills at most its own share of the listener's
//! `connections_max` seats, and every other client can still connect.
//!
//! A source is an IPv4 address, or the /64 prefix of an IPv6 address (one host is handed a
//! whole /64, so counting its addresses one by one would give it 2^64 shares). An
//! IPv4-mapped IPv6 address counts as the IPv4 address it maps.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Whom a connection counts against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    V4([u8; 4]),
    /// The first 64 bits of an IPv6 address.
    V6Prefix(u64),
}

impl Source {
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Source::V4(v4.octets()),
            IpAddr::V6(v6) => Source::V6Prefix((v6.to_bits() >> 64) as u64),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::V4(o) => write!(f, "{}", std::net::Ipv4Addr::from(*o)),
            Source::V6Prefix(p) => {
                let addr = std::net::Ipv6Addr::from_bits(u128::from(*p) << 64);
                write!(f, "{addr}/64")
            }
        }
    }
}

/// The connections each source holds on one listener, at most `max` each.
#[derive(Debug)]
pub struct SourceSeats {
    max: usize,
    held: Mutex<HashMap<Source, usize>>,
}

/// One connection's seat: given back when dropped (the connection closed).
#[derive(Debug)]
pub struct SourceSeat {
    seats: Arc<SourceSeats>,
    source: Source,
}

impl SourceSeats {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(SourceSeats {
            max: max.max(1),
            held: Mutex::new(HashMap::new()),
        })
    }

    /// A seat for one more connection from `ip`, or `None` if its source holds `max`.
    pub fn try_take(self: &Arc<Self>, ip: IpAddr) -> Option<SourceSeat> {
        let source = Source::of(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(source).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(SourceSeat {
            seats: self.clone(),
            source,
        })
    }

    /// Connections `ip`'s source holds now.
    pub fn held(&self, ip: IpAddr) -> usize {
        self.held_by(Source::of(ip))
    }

    /// Connections `source` holds now.
    pub fn held_by(&self, source: Source) -> usize {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(&source).copied().unwrap_or(0)
    }

    /// Sources holding at least one connection now.
    pub fn sources(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl Drop for SourceSeat {
    fn drop(&mut self) {
        let mut held = self.seats.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                // No entry outlives its source's last connection: the map holds only
                // sources connected now, however many have come and gone.
                held.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_source_holds_at_most_max_and_gets_its_seats_back() {
        let seats = SourceSeats::new(2);
        let a1 = seats.try_take(ip("10.0.0.1")).unwrap();
        let _a2 = seats.try_take(ip("10.0.0.1")).unwrap();
        assert!(seats.try_take(ip("10.0.0.1")).is_none());
        // The IPv4-mapped form is the same source.
        assert!(seats.try_take(ip("::ffff:10.0.0.1")).is_none());
        // Another source is not affected.
        let _b = seats.try_take(ip("10.0.0.2")).unwrap();
        drop(a1);
        assert_eq!(seats.held(ip("10.0.0.1")), 1);
        let _a3 = seats.try_take(ip("10.0.0.1")).unwrap();
        assert_eq!(seats.sources(), 2);
    }

    #[test]
    fn an_ipv6_source_is_its_slash_64() {
        let seats = SourceSeats::new(1);
        let _a = seats.try_take(ip("2001:db8:1:2::1")).unwrap();
        assert!(seats.try_take(ip("2001:db8:1:2:ffff::9")).is_none());
        let _b = seats.try_take(ip("2001:db8:1:3::1")).unwrap();
        assert_eq!(
            Source::of(ip("2001:db8:1:2::1")).to_string(),
            "2001:db8:1:2::/64"
        );
    }

    #[test]
    fn no_entry_outlives_its_last_connection() {
        let seats = SourceSeats::new(3);
        for i in 0..100u8 {
            let s = seats.try_take(IpAddr::from([10, 1, 0, i])).unwrap();
            drop(s);
        }
        assert_eq!(seats.sources(), 0);
    }
}
