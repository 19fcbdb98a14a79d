//! `GET /metrics`: Prometheus text.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use parking_lot::Mutex;

/// Upper bounds of the request latency histogram's buckets, in seconds.
pub const LATENCY_BUCKETS_SECONDS: [f64; 10] =
    [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5, 30.0];

#[derive(Default)]
struct Counts {
    /// Requests by route, then status.
    requests: BTreeMap<String, BTreeMap<u16, u64>>,
    /// Cumulative counts per bucket, then the total.
    buckets: [u64; LATENCY_BUCKETS_SECONDS.len()],
    count: u64,
    sum_seconds: f64,
}

/// The server's counters.
#[derive(Default)]
pub struct Metrics {
    counts: Mutex<Counts>,
}

impl Metrics {
    /// Counts one answered request.
    pub fn observe(&self, route: &str, status: u16, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let mut counts = self.counts.lock();
        // The route's name is copied once, not per request.
        if !counts.requests.contains_key(route) {
            counts.requests.insert(route.to_string(), BTreeMap::new());
        }
        let by_status = counts.requests.get_mut(route).expect("inserted just above");
        *by_status.entry(status).or_default() += 1;
        for (bucket, bound) in counts.buckets.iter_mut().zip(LATENCY_BUCKETS_SECONDS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        counts.count += 1;
        counts.sum_seconds += seconds;
    }

    /// The text exposition, with the store's and the streams' figures.
    pub fn render(&self, gauges: &Gauges) -> String {
        let counts = self.counts.lock();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP convlog_server_requests_total Requests answered, by route and status."
        );
        let _ = writeln!(out, "# TYPE convlog_server_requests_total counter");
        for (route, by_status) in &counts.requests {
            for (status, count) in by_status {
                let _ = writeln!(
                    out,
                    "convlog_server_requests_total{{route=\"{route}\",status=\"{status}\"}} {count}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP convlog_server_request_duration_seconds Time to answer a request."
        );
        let _ = writeln!(
            out,
            "# TYPE convlog_server_request_duration_seconds histogram"
        );
        for (bucket, bound) in counts.buckets.iter().zip(LATENCY_BUCKETS_SECONDS) {
            let _ = writeln!(
                out,
                "convlog_server_request_duration_seconds_bucket{{le=\"{bound}\"}} {bucket}"
            );
        }
        let _ = writeln!(
            out,
            "convlog_server_request_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            counts.count
        );
        let _ = writeln!(
            out,
            "convlog_server_request_duration_seconds_sum {}",
            counts.sum_seconds
        );
        let _ = writeln!(
            out,
            "convlog_server_request_duration_seconds_count {}",
            counts.count
        );
        let _ = writeln!(
            out,
            "# HELP convlog_store_events Events in the store's log (its last LSN)."
        );
        let _ = writeln!(out, "# TYPE convlog_store_events gauge");
        let _ = writeln!(out, "convlog_store_events {}", gauges.store_events);
        let _ = writeln!(out, "# HELP convlog_server_contexts Contexts in the store.");
        let _ = writeln!(out, "# TYPE convlog_server_contexts gauge");
        let _ = writeln!(out, "convlog_server_contexts {}", gauges.contexts);
        let samples: [(&str, &str, &str, u64); 6] = [
            (
                "convlog_store_appends_total",
                "counter",
                "Batches (atomic appends) written to the log since start, by every writer in the server (handlers and runs).",
                gauges.appends,
            ),
            (
                "convlog_store_fsyncs_total",
                "counter",
                "Commits the log made durable since start, fdatasync calls and durable writes (one covers every batch of a group commit).",
                gauges.fsyncs,
            ),
            (
                "convlog_store_writes_total",
                "counter",
                "Positioned writes the log issued since start.",
                gauges.writes,
            ),
            (
                "convlog_server_streams_open",
                "gauge",
                "Event streams open now.",
                gauges.streams_open,
            ),
            (
                "convlog_server_streams_opened_total",
                "counter",
                "Event streams opened since start.",
                gauges.streams_opened,
            ),
            (
                "convlog_server_stream_events_total",
                "counter",
                "Events sent on event streams since start.",
                gauges.stream_events,
            ),
        ];
        for (name, kind, help, value) in samples {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {value}");
        }
        out
    }
}

/// The figures `/metrics` reads from the store and the streams when asked.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Events in the store's log (its last LSN).
    pub store_events: u64,
    /// Contexts in the store.
    pub contexts: usize,
    /// Batches the log appended since open.
    pub appends: u64,
    /// `fdatasync` calls since open.
    pub fsyncs: u64,
    /// Positioned writes since open.
    pub writes: u64,
    /// Event streams open now.
    pub streams_open: u64,
    /// Event streams opened since start.
    pub streams_opened: u64,
    /// Events sent on streams since start.
    pub stream_events: u64,
}
