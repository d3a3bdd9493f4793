//! What one run of one system measured, and the medians and ratios of the
//! summary. Pure: numbers in, numbers out.

use std::time::Duration;

/// One run of one system on one workload.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Rows made durable per second (enqueued mode: until the last is durable).
    pub rows_per_s: f64,
    /// Append latency percentiles, in milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// objwal only: objects created per second and their median size.
    pub objects_per_s: Option<f64>,
    pub object_bytes: Option<u64>,
}

impl Run {
    /// A run of `rows` rows in `elapsed` with these append latencies.
    pub fn new(rows: u64, elapsed: Duration, mut latencies: Vec<Duration>) -> Run {
        latencies.sort_unstable();
        Run {
            rows_per_s: rows as f64 / elapsed.as_secs_f64().max(1e-9),
            p50_ms: percentile_ms(&latencies, 0.50),
            p99_ms: percentile_ms(&latencies, 0.99),
            objects_per_s: None,
            object_bytes: None,
        }
    }
}

/// The `q` quantile of sorted durations, in milliseconds (0 when empty).
pub fn percentile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(at).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// The median (the upper one of an even count; 0 when empty).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The median of the per-run ratios `a[i] / b[i]`: each ratio is taken
/// within one interleaved round, so a slow minute of the machine slows
/// both sides of it.
pub fn median_ratio(a: &[f64], b: &[f64]) -> f64 {
    median(
        a.iter()
            .zip(b)
            .filter(|(_, b)| **b > 0.0)
            .map(|(a, b)| a / b)
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_medians_and_ratios() {
        let ms = |n: u64| Duration::from_millis(n);
        let sorted: Vec<_> = (1..=100).map(ms).collect();
        assert_eq!(percentile_ms(&sorted, 0.5), 51.0);
        assert_eq!(percentile_ms(&sorted, 0.99), 99.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_ratio(&[2.0, 9.0, 4.0], &[1.0, 3.0, 0.0]), 3.0);
        let run = Run::new(1000, Duration::from_secs(2), vec![ms(3), ms(1), ms(2)]);
        assert_eq!((run.rows_per_s, run.p50_ms), (500.0, 2.0));
    }
}
