//! What a run tells its operator: the log lines it writes and the metrics file it leaves
//! (README § Logs, § Metrics), a behaviour per file.

mod alert_rules;
mod log_lines;
mod metrics_path;
mod metrics_series;
