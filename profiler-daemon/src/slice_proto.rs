//! The pprof messages of slice and roll-up files: the `pprof` crate's generated types of
//! Google's `profile.proto`, except `Profile` and `Sample`, declared here with the proto's
//! field numbers because profilerd's roll-ups add fields of their own, numbered from 100,
//! which pprof tools skip: to `Profile` each member's period, to `Sample` the per-member
//! counts, the samples per second and (when the hour's frequency changed) CPU times. A slice
//! holds only the samples per second.

#![allow(missing_docs)] // The proto's own field comments are the documentation.

pub use pprof::proto::{Function, Label, Line, Location, Mapping, ValueType};

/// A profile: samples, and the tables they refer to.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
    #[prost(int64, tag = "15")]
    pub doc_url: i64,
    /// profilerd's own field, in roll-ups only: each member slice's period (ns per sample),
    /// packed. Absent in roll-ups written before it: every member then has `period`.
    #[prost(uint64, repeated, packed = "true", tag = "100")]
    pub member_period_ns: Vec<u64>,
}

/// A stack (leaf first) with its values and labels.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
    /// profilerd's own field, in roll-ups only (pprof tools skip it): (member slice index,
    /// count) pairs, flattened, packed.
    #[prost(uint64, repeated, packed = "true", tag = "100")]
    pub slice_counts: Vec<u64>,
    /// profilerd's own field, in slices and roll-ups: the stack's samples per second, as
    /// (gap in seconds, count) varint pairs (`seconds.rs`), kept as read.
    #[prost(bytes = "bytes", tag = "101")]
    pub second_counts: prost::bytes::Bytes,
    /// profilerd's own field, in roll-ups whose CPU time does not follow from their counts
    /// and periods (the frequency changed within the hour): the CPU time, ns, of each
    /// (member, count) pair of `slice_counts`, in the same order, packed.
    #[prost(uint64, repeated, packed = "true", tag = "102")]
    pub slice_cpu_ns: Vec<u64>,
}
