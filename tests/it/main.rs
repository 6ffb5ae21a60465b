//! The behaviour tests: one binary, a module per suite (docs/ARCHITECTURE.md §
//! Tests), over the shared harness in `support`. Each runs the real binary against real
//! `redis-server` processes it starts on free loopback ports.

mod support;

mod access;
mod basics;
mod command_line;
mod crash;
mod docs;
mod exit_statuses;
mod generated;
mod house;
mod jitter;
mod kinds;
mod lease;
mod lost_replies;
mod note;
mod observability;
mod operators;
mod packaging;
mod policies;
mod privileges;
mod queue;
mod redlock;
mod reliability;
mod script_lock;
mod sentinel;
mod several_keys;
mod signals;
mod topologies;
mod waiting_line;
mod watch;
