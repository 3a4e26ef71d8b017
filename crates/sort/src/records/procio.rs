//! Process I/O counters from `/proc/self/io` (Linux): syscall-level and storage-level bytes.
//! Counters of reaped children are included, so a parent can measure a child's run.

/// One reading of `/proc/self/io`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounters {
    /// Bytes passed to read-like syscalls (page cache hits included).
    pub rchar: u64,
    /// Bytes passed to write-like syscalls.
    pub wchar: u64,
    /// Bytes the process caused to be fetched from storage.
    pub read_bytes: u64,
    /// Bytes the process caused to be sent to storage.
    pub write_bytes: u64,
}

impl IoCounters {
    /// The current counters, or zeros where `/proc/self/io` is not available.
    pub fn now() -> IoCounters {
        std::fs::read_to_string("/proc/self/io")
            .map(|text| IoCounters::parse(&text))
            .unwrap_or_default()
    }

    fn parse(text: &str) -> IoCounters {
        let mut c = IoCounters::default();
        for line in text.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim().parse().unwrap_or(0);
            match name {
                "rchar" => c.rchar = value,
                "wchar" => c.wchar = value,
                "read_bytes" => c.read_bytes = value,
                "write_bytes" => c.write_bytes = value,
                _ => {}
            }
        }
        c
    }

    /// The counts since `earlier`.
    pub fn since(&self, earlier: &IoCounters) -> IoCounters {
        IoCounters {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_format() {
        let text = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        let c = IoCounters::parse(text);
        assert_eq!(
            (c.rchar, c.wchar, c.read_bytes, c.write_bytes),
            (10, 20, 4096, 8192)
        );
    }
}
